#pragma once
// The bookkeeping every example's training loop shares, around zt::initialize's Training:
//   - the command line every example takes besides --config/--set (RunArgs),
//   - per optimizer step: micro-batch losses, tokens and samples summed over ranks, timed
//     (StepTotals), one metrics.jsonl line (rank 0), the progress line every steps_per_print,
//   - evaluation passes over a BatchStream (every rank runs the same number of forwards, as
//     stage 3 gathers collectively),
//   - with a `freeze` list, a copy of every parameter before training and the check after it
//     that the frozen ones are bit-identical and the others moved (parameter_snapshot.h),
//   - summary.json (rank 0).
//
//   - checkpoints (train/checkpointing.h): the constructor resumes from the config's
//     checkpoint.save_dir unless --fresh, end_step saves every checkpoint.save_interval steps
//     and after the last one; metrics.jsonl is appended to when resuming.
//
//   TrainingRun run(t, a);                        // a: RunArgs
//   for (int64_t step = run.first_step(); step <= a.steps; ++step) {
//     run.begin_step();
//     ... run.add(loss, &batch) per micro-batch ...
//     StepTotals s = run.end_step(step, {{"extra", 1.0}});
//   }
//   run.write_summary({...});

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "core/config/cli_options.h"
#include "train/checkpointing.h"
#include "train/initialize.h"
#include "train/metrics_log.h"
#include "train/parameter_snapshot.h"

namespace zt::train {

using Clock = std::chrono::steady_clock;
using Fields = std::vector<std::pair<std::string, double>>;

double seconds_since(Clock::time_point t);
// "a, b, c"
std::string join(const std::vector<std::string>& names);

struct RunArgs {
  std::string train_shard, valid_shard, out_dir, checkpoint_dir;
  int64_t steps = 0;
  bool fresh = false;
};
// --train-shard (default data.path), --valid-shard, --steps, --out-dir, --checkpoint-dir
// (checkpoint.save_dir), --fresh (do not resume).
void add_run_options(CliOptions& cli, RunArgs& a, const std::string& out_dir);
// The training shard: --train-shard, else the config's data.path.
std::string train_shard_of(const RunArgs& a, const Config& config);

// The evaluation stream over the shard at `path` (null when path is empty): `options` with
// training false (seed + 1, length-bucketed, ends with its epoch).
std::unique_ptr<BatchStream> validation_stream(const Training& t, const std::string& path,
                                               BatchStreamOptions options);

// One optimizer step, summed over ranks.
struct StepTotals {
  int64_t step = 0;
  double loss = 0;  // mean over micro-batches and ranks
  double tokens = 0, padded = 0, samples = 0;
  double seconds = 0;
  double padding_fraction() const { return 1.0 - tokens / padded; }
};

class TrainingRun {
 public:
  // Resumes from the latest checkpoint (see above).
  TrainingRun(Training& t, const RunArgs& a);

  // The first step to train: 1, or the step after the checkpoint resumed from.
  int64_t first_step() const { return first_step_; }

  void begin_step();
  // One micro-batch: its loss, and its tokens and samples (batch), or `samples` samples.
  void add(const torch::Tensor& loss, const data::Batch* batch, int64_t samples = 0);
  // Sums over ranks, writes the metrics line (the common fields, then `extra`) and returns the
  // totals. Prints `progress` (after "step s/N | loss L") every steps_per_print steps. Then
  // saves a checkpoint when checkpoint.save_interval or the last step says so.
  StepTotals end_step(int64_t step, const Fields& extra = {},
                      const std::function<std::string(const StepTotals&)>& progress = {});
  bool prints(int64_t step) const;

  // An evaluation pass over `stream` (restarted; up to max_batches, 0 = all): fn adds to `sums`
  // per batch inside engine.forward, in eval mode without grad. Returns the sums over ranks.
  std::vector<double> evaluate(BatchStream& stream, int64_t max_batches, size_t num_sums,
                               const std::function<void(const data::Batch&, double*)>& fn);

  // The freeze check (none without a freeze list); throws when a frozen parameter moved.
  ParameterChanges check_frozen();
  // Writes summary.json: steps, world_size, timings and throughput, model-state bytes, the
  // freeze check's counts, then `extra`.
  void write_summary(const Fields& extra);

  Clock::time_point start() const { return start_; }
  double train_seconds() const { return train_seconds_; }

 private:
  Training& t_;
  RunArgs args_;
  Checkpointing checkpoints_;
  int64_t first_step_;
  MetricsLog metrics_;
  std::optional<ParameterSnapshot> initial_;
  ParameterChanges changes_;
  Clock::time_point start_, step_start_, train_start_;
  bool training_started_ = false;
  double train_seconds_ = 0;
  double micro_[4] = {0, 0, 0, 0};  // loss sum, tokens, padded tokens, samples
  double total_tokens_ = 0, total_padded_ = 0, total_samples_ = 0;
};

}  // namespace zt::train
