#pragma once
// zt::BatchStream: one rank's batches of a token dataset, built from the config's `data` block
// (core/config/config.h, DataConfig): sampler -> collator -> loader (data/), epochs chained.
//
//   data.max_tokens > 0   batches by padded-token budget, else train_micro_batch_size_per_gpu
//                         samples each
//   data.bucketing        LengthBucketedSampler (sorted by length inside shuffled mega-batches of
//                         data.mega_batch_mult steps), else RandomBatchSampler
//   data.max_length       samples cut to this many tokens (and to the model's, when smaller)
//   data.pad_to_multiple  each batch padded to its longest sample, rounded up to this
//   data.seed             the sampler's seed (unset: the top-level seed)
//   data.drop_last        the tail that does not fill a step is dropped, else filled by repeats
//   sequence_parallel_size  the ranks of a sequence group read one batch and each keeps its part
//                         of the sequence (data/sequence_split.h)
//
// Pads take the shard's pad id (TokenDataset::pad_id(): the tokenizer's, recorded by
// zt-pretokenize), so a shard without one is an error naming the file.
//
// Every rank computes the same plan and takes its own batch of every step (data/batch_sampler.h),
// so every rank gets the same number of batches: a stage-3 forward, a collective, never waits on
// a rank that ran out. A training stream never ends (next() starts the next epoch); an evaluation
// stream (training = false: seed + 1, always length-bucketed, no drop) ends with its epoch. Its
// last step's batches are filled with repeats of earlier samples; those rows carry the ignore
// index as labels and are marked in Batch::repeated, so an evaluation counts every sample once.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/config/config.h"
#include "data/batch_sampler.h"
#include "data/loader.h"
#include "data/token_dataset.h"
#include "parallel/communicator.h"

namespace zt {

// What the program says about its batches beyond the config's data block.
struct BatchStreamOptions {
  bool training = true;
  // The model's longest input (0 = none): samples are cut to min(data.max_length, this).
  int64_t max_length = 0;
  // Labels are the inputs shifted by one (a causal LM); the sampler then budgets max_length + 1
  // tokens per sample, since the shift turns them into max_length inputs.
  bool causal_lm_shift = false;
  std::optional<bool> bucketing = {};           // training only; unset = data.bucketing
  std::optional<int64_t> pad_to_multiple = {};  // unset = data.pad_to_multiple
  int num_workers = 1;                          // loader threads (data/loader.h)
  // Where next() puts the batch's tensors (Training::make_loader: the model's device); unset:
  // the host.
  std::optional<c10::Device> device = {};
};

class BatchStream {
 public:
  BatchStream(std::shared_ptr<const data::TokenDataset> dataset, const Config& config,
              const dist::Communicator& comm, BatchStreamOptions options = {});
  BatchStream(const BatchStream&) = delete;
  BatchStream& operator=(const BatchStream&) = delete;

  // The next batch of this rank. Training: a new epoch starts when one ends, so there is always
  // one. Evaluation: nullopt at the end of the epoch.
  std::optional<data::Batch> next();
  // Back to epoch 0, batch 0 (evaluation passes start here).
  void restart();

  int64_t epoch() const { return epoch_; }
  int64_t num_batches() const { return loader_->num_batches(); }
  // For checkpoints: the sampler's position after the batches handed out.
  std::string sampler_state() const { return loader_->state().to_string(); }
  // Resumes after the batches a sampler_state() string says were handed out (a checkpoint of
  // this stream's sampler); throws zt::Error when it belongs to another sampler.
  void load_sampler_state(const std::string& state);
  // Batch 0 of epoch `epoch`.
  void start_epoch(int64_t epoch);
  const data::TokenDataset& dataset() const { return *dataset_; }
  const data::BatchSampler& sampler() const { return *sampler_; }

 private:
  std::shared_ptr<const data::TokenDataset> dataset_;
  std::unique_ptr<data::BatchSampler> sampler_;
  std::unique_ptr<data::Loader> loader_;
  bool training_;
  std::optional<c10::Device> device_;
  int64_t epoch_ = 0;
  int parts_ = 1, part_ = 0;  // the sequence split: this rank's part of each batch
  int64_t pad_id_ = 0;
};

}  // namespace zt
