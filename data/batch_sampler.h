#pragma once
// Batch samplers: which samples form each batch of an epoch, for one rank of a data-parallel job.
//
//   LengthBucketedSampler s(ds.lengths(), {.batch_size = 24, .seed = 1, .rank = r, .world_size =
//   n}); s.set_epoch(e); while (s.has_next()) { const std::vector<int64_t>& idx = s.next(); ... }
//   SamplerState st = s.state();   // store in the checkpoint; load_state(st) resumes exactly
//
// Contract shared by every sampler here:
// - An epoch's plan is a list of steps; each step has exactly world_size batches and rank r takes
//   batch r of every step, so every rank gets the same number of batches (a rank with fewer
//   would leave the others waiting in a collective forever).
// - The plan depends only on (lengths, options, epoch): every rank computes the whole plan itself,
//   no communication, and two runs with the same inputs give the same batches.
// - Tail: samples that do not fill the last step are dropped (TailPolicy::kDrop) or the step is
//   filled with samples repeated from the start of the epoch's order (kPadByRepeat). coverage()
//   tells which.
// - Batches are sized by sample count (batch_size) or by a token budget (max_tokens): then
//   B * T_padded <= max_tokens for every batch, T_padded being the length the collator pads to
//   (longest sample, capped at max_length, rounded up to pad_to_multiple): give the sampler the
//   collator's max_length and pad_to_multiple.

#include <cstdint>
#include <string>
#include <vector>

namespace zt::data {

enum class TailPolicy { kDrop, kPadByRepeat };

struct SamplerOptions {
  int64_t batch_size = 0;        // samples per batch per rank; 0 when max_tokens sizes batches
  int64_t max_tokens = 0;        // padded-token budget per batch; 0 when batch_size sizes batches
  int64_t max_batch_size = 0;    // with max_tokens: at most this many samples (0 = no cap)
  int64_t mega_batch_mult = 50;  // mega-batch = mega_batch_mult steps' worth of samples (HF's 50)
  uint64_t seed = 0;
  TailPolicy tail = TailPolicy::kPadByRepeat;
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t max_length = 0;       // the collator's truncation (0 = none); caps lengths in budgets
  int64_t pad_to_multiple = 1;  // the collator's rounding of T
  // false: skip the longest-first swap (LengthBucketedSampler only).
  bool longest_first = true;
};

// Where a rank stands: small, printable, stored in checkpoints.
struct SamplerState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t next_batch = 0;  // batches of this rank already handed out in this epoch
  int64_t num_samples = 0;
  int64_t world_size = 1;
  int64_t rank = 0;
  uint64_t fingerprint = 0;  // hash of lengths and options: a state fits only its own sampler

  // "zt-sampler-state v1 seed=1 epoch=2 next_batch=17 ..." and back; parse() throws zt::Error
  // naming the bad field.
  std::string to_string() const;
  static SamplerState parse(const std::string& text);
  bool operator==(const SamplerState& o) const;
};

// Per-epoch accounting over all ranks.
struct EpochCoverage {
  int64_t num_batches = 0;        // over all ranks
  int64_t num_samples = 0;        // sample slots in the plan (repeats counted)
  std::vector<int64_t> dropped;   // samples absent from the epoch
  std::vector<int64_t> repeated;  // samples present more than once (once per extra copy)
};

class BatchSampler {
 public:
  BatchSampler(std::vector<int64_t> lengths, SamplerOptions options, const char* kind);
  virtual ~BatchSampler() = default;

  // Builds the plan of `epoch` and rewinds to its first batch. Call before the first next().
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  // This rank's batches of the current epoch, in order.
  const std::vector<std::vector<int64_t>>& batches() const { return rank_batches_; }
  int64_t num_batches() const { return static_cast<int64_t>(rank_batches_.size()); }
  bool has_next() const { return next_batch_ < num_batches(); }
  // The next batch of this rank; throws when the epoch is exhausted.
  const std::vector<int64_t>& next();
  int64_t position() const { return next_batch_; }

  SamplerState state() const;
  // Rebuilds the state's epoch and skips the batches already handed out. Throws zt::Error when
  // the state belongs to another sampler (seed, dataset size, world size, rank or options differ).
  void load_state(const SamplerState& state);

  // Every rank's batches: steps[s][r] is rank r's batch at step s.
  const std::vector<std::vector<std::vector<int64_t>>>& steps() const { return steps_; }
  EpochCoverage coverage() const;
  const SamplerOptions& options() const { return options_; }
  const std::vector<int64_t>& lengths() const { return lengths_; }
  // T the collator will pad a batch to.
  int64_t padded_length(const std::vector<int64_t>& batch) const;

 protected:
  // The epoch's batches over all ranks, in step order (step s = batches [s*W, (s+1)*W)); the count
  // must be a multiple of world_size.
  virtual std::vector<std::vector<int64_t>> plan_epoch(int64_t epoch) const = 0;

  // Helpers for the subclasses.
  int64_t capped_length(int64_t i) const;
  int64_t round_length(int64_t len) const;
  // The epoch's sample order with the sample-level tail applied (count mode: a multiple of
  // batch_size * world_size; token mode: unchanged).
  std::vector<int64_t> ordered_samples(int64_t epoch) const;
  // Cuts `order` into consecutive batches by count or token budget.
  std::vector<std::vector<int64_t>> cut(const std::vector<int64_t>& order) const;
  // Drops or repeats whole batches so their count is a multiple of world_size.
  void fit_to_world(std::vector<std::vector<int64_t>>* batches) const;

  std::vector<int64_t> lengths_;
  SamplerOptions options_;

 private:
  uint64_t fingerprint() const;

  int64_t epoch_ = -1;
  int64_t next_batch_ = 0;
  std::vector<std::vector<std::vector<int64_t>>> steps_;
  std::vector<std::vector<int64_t>> rank_batches_;
};

// Smart batching, distributed (Hugging Face's LengthGroupedSampler, extended to ranks):
// permutation from (seed, epoch) -> mega-batches of mega_batch_mult steps' worth of samples ->
// sorted by length (descending) inside each -> cut into batches -> consecutive batches grouped
// into steps of world_size, so the ranks of a step get batches of similar length -> steps
// shuffled -> the step holding the longest sample moved first, so an out-of-memory shows at
// step 1 rather than hours in.
class LengthBucketedSampler : public BatchSampler {
 public:
  LengthBucketedSampler(std::vector<int64_t> lengths, SamplerOptions options);

 protected:
  std::vector<std::vector<int64_t>> plan_epoch(int64_t epoch) const override;
};

// The baseline: random batches (a fresh permutation per epoch cut in order), same tail handling
// and dealing to ranks, no length grouping.
class RandomBatchSampler : public BatchSampler {
 public:
  RandomBatchSampler(std::vector<int64_t> lengths, SamplerOptions options);

 protected:
  std::vector<std::vector<int64_t>> plan_epoch(int64_t epoch) const override;
};

}  // namespace zt::data
