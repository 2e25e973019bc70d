#pragma once
// Batch samplers: which samples form each batch of an epoch, for one rank of a data-parallel job.
//
//   LengthBucketedSampler s(ds.lengths(), {.batch_size = 24, .seed = 1, .rank = r, .world_size =
//   n}); s.set_epoch(e); while (s.has_next()) { const std::vector<int64_t>& idx = s.next(); ... }
//   SamplerState st = s.state();   // store in the checkpoint; load_state(st) resumes exactly
//
// Resizing: a state saved at another world size (an elastic job that lost or gained nodes) loads
// too. The epoch's samples that the saved run's ranks already took are set aside, and the rest
// of the epoch is planned again for the new world size (and micro batch), so across the resize
// no sample is taken twice and none is skipped beyond what the tail policy drops at the epoch's
// end. The state records each earlier layout of the epoch (SamplerSegment), so every rank can
// recompute what was taken without communication.
//
// Contract shared by every sampler here:
// - An epoch's plan is a list of steps; each step has exactly world_size batches and rank r takes
//   batch r of every step, so every rank gets the same number of batches (a rank with fewer
//   would leave the others waiting in a collective forever).
// - The plan depends only on (lengths, options, epoch): every rank computes the whole plan itself,
//   no communication, and two runs with the same inputs give the same batches.
// - Tail: samples that do not fill the last step are dropped (TailPolicy::kDrop) or the step is
//   filled with samples repeated from the start of the epoch's order (kPadByRepeat). coverage()
//   tells which, and repeated_slots() which slots of this rank's batches hold such a repeat, so
//   that an evaluation counts each sample once.
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

// One layout an epoch ran with before a resize: `steps` steps of `world_size` batches of
// `batch_size` samples (0 in token-budget mode).
struct SamplerSegment {
  int64_t world_size = 1;
  int64_t batch_size = 0;
  int64_t steps = 0;
  bool operator==(const SamplerSegment& o) const {
    return world_size == o.world_size && batch_size == o.batch_size && steps == o.steps;
  }
};

// Where a rank stands: small, printable, stored in checkpoints.
struct SamplerState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t next_batch = 0;  // batches of this rank already handed out in this epoch
  int64_t num_samples = 0;
  int64_t world_size = 1;
  int64_t rank = 0;
  // The current layout's samples per batch (0: token budget); -1 when read from a v1 state,
  // which predates resizing: the loading sampler's own.
  int64_t batch_size = 0;
  // Earlier layouts of this epoch, oldest first; empty unless the job was resized mid-epoch.
  std::vector<SamplerSegment> history;
  // Hash of lengths and options at this batch_size: a state fits only its own sampler.
  uint64_t fingerprint = 0;

  // "zt-sampler-state v2 seed=1 epoch=2 next_batch=17 ... history=4x8x30 fingerprint=..." and
  // back (v1 strings, without batch_size and history, still parse); parse() throws zt::Error
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
  // The slots (positions in the batch) of this rank's batch `batch` that hold a sample some slot
  // before them in the current layout's plan already holds, in plan order (step, then rank, then
  // slot): the tail's repeats. Empty for most batches, and always with TailPolicy::kDrop.
  const std::vector<int64_t>& repeated_slots(int64_t batch) const;
  // The next batch of this rank; throws when the epoch is exhausted.
  const std::vector<int64_t>& next();
  int64_t position() const { return next_batch_; }

  SamplerState state() const;
  // Rebuilds the state's epoch and skips the batches already handed out. Saved at another world
  // size, the epoch's untaken samples are planned again for this one (see the top of this file;
  // the batch size may differ then too). Throws zt::Error when the state belongs to another
  // sampler (seed, dataset size or options differ; the rank or batch size at the same world
  // size).
  void load_state(const SamplerState& state);
  // Earlier layouts of the current epoch (empty unless a resized state was loaded).
  const std::vector<SamplerSegment>& history() const { return history_; }

  // Every rank's batches: steps[s][r] is rank r's batch at step s.
  const std::vector<std::vector<std::vector<int64_t>>>& steps() const { return steps_; }
  EpochCoverage coverage() const;
  const SamplerOptions& options() const { return options_; }
  const std::vector<int64_t>& lengths() const { return lengths_; }
  // The samples of `epoch` that the layouts in `history` took, in the order they were taken
  // (a sample the tail repeated counts once).
  std::vector<int64_t> taken(int64_t epoch, const std::vector<SamplerSegment>& history) const;
  // T the collator will pad a batch to.
  int64_t padded_length(const std::vector<int64_t>& batch) const;

 protected:
  // One layout's batches over all ranks, in step order (step s = batches [s*W, (s+1)*W), W =
  // o.world_size); the count must be a multiple of W. `pool` holds the samples still to take in
  // the epoch's permutation order (all of them before any resize); `step_stream` seeds the
  // layout's step shuffle.
  virtual std::vector<std::vector<int64_t>> plan(const std::vector<int64_t>& pool,
                                                 const SamplerOptions& o,
                                                 uint64_t step_stream) const = 0;

  // Helpers for the subclasses.
  int64_t capped_length(int64_t i) const;
  int64_t round_length(int64_t len) const;
  // `pool` with the sample-level tail applied (count mode: a multiple of batch_size *
  // world_size; token mode: unchanged).
  std::vector<int64_t> with_tail(std::vector<int64_t> pool, const SamplerOptions& o) const;
  // Cuts `order` into consecutive batches by count or token budget.
  std::vector<std::vector<int64_t>> cut(const std::vector<int64_t>& order,
                                        const SamplerOptions& o) const;
  // Drops or repeats whole batches so their count is a multiple of world_size.
  void fit_to_world(std::vector<std::vector<int64_t>>* batches, const SamplerOptions& o) const;

  std::vector<int64_t> lengths_;
  SamplerOptions options_;

 private:
  uint64_t fingerprint(int64_t batch_size) const;
  // The options of an earlier layout.
  SamplerOptions layout(const SamplerSegment& segment) const;
  // Plans the current layout of `epoch` after `history`, rewound to its first batch.
  void build(int64_t epoch, std::vector<SamplerSegment> history);

  int64_t epoch_ = -1;
  int64_t next_batch_ = 0;
  std::vector<SamplerSegment> history_;
  std::vector<std::vector<std::vector<int64_t>>> steps_;
  std::vector<std::vector<int64_t>> rank_batches_;
  std::vector<std::vector<int64_t>> rank_repeats_;  // repeated_slots() of each rank batch
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
  std::vector<std::vector<int64_t>> plan(const std::vector<int64_t>& pool, const SamplerOptions& o,
                                         uint64_t step_stream) const override;
};

// The baseline: random batches (a fresh permutation per epoch cut in order), same tail handling
// and dealing to ranks, no length grouping.
class RandomBatchSampler : public BatchSampler {
 public:
  RandomBatchSampler(std::vector<int64_t> lengths, SamplerOptions options);

 protected:
  std::vector<std::vector<int64_t>> plan(const std::vector<int64_t>& pool, const SamplerOptions& o,
                                         uint64_t step_stream) const override;
};

}  // namespace zt::data
