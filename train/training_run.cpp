#include "train/training_run.h"

#include <cmath>
#include <filesystem>
#include <numeric>

#include "base/error.h"
#include "base/logging.h"
#include "core/profile/flops_profiler.h"
#include "parallel/topology.h"
#include "train/comms_report.h"
#include "train/rank_sum.h"

namespace po = boost::program_options;

namespace zt::train {
namespace {

void append(Fields& out, const Fields& more) {
  out.insert(out.end(), more.begin(), more.end());
}

}  // namespace

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

void add_run_options(CliOptions& cli, RunArgs& a, const std::string& out_dir) {
  cli.add()("train-shard", po::value(&a.train_shard), "training shard (.ztt); default data.path")(
      "valid-shard", po::value(&a.valid_shard), "validation shard (.ztt); none = no validation")(
      "steps", po::value(&a.steps)->default_value(100), "optimizer steps")(
      "out-dir", po::value(&a.out_dir)->default_value(out_dir),
      "metrics.jsonl and summary.json go here")(
      "checkpoint-dir", po::value(&a.checkpoint_dir),
      "checkpoints go here (overrides checkpoint.save_dir): every checkpoint.save_interval "
      "steps and after the last; a run resumes from the latest one there")(
      "fresh", po::bool_switch(&a.fresh),
      "start from step 1 even when the checkpoint dir holds a checkpoint (ignored in a process "
      "the launcher restarted, which always resumes)");
}

std::string train_shard_of(const RunArgs& a, const Config& config) {
  const std::string path = a.train_shard.empty() ? config.data.path : a.train_shard;
  ZT_CHECK(!path.empty(), "no --train-shard and no data.path in the config");
  return path;
}

std::unique_ptr<BatchStream> validation_stream(const Training& t, const std::string& path,
                                               BatchStreamOptions options) {
  if (path.empty()) return nullptr;
  options.training = false;
  return t.make_loader(std::make_shared<const data::TokenDataset>(path), options);
}

TrainingRun::TrainingRun(Training& t, const RunArgs& a)
    : t_(t),
      args_(a),
      checkpoints_(t, {.fresh = a.fresh, .dir = a.checkpoint_dir}),
      first_step_(checkpoints_.resume() + 1),
      metrics_(
          [&] {
            std::filesystem::create_directories(a.out_dir);
            return t.comm->rank() == 0 ? a.out_dir + "/metrics.jsonl" : "";
          }(),
          /*append=*/first_step_ > 1),
      start_(Clock::now()) {
  // With a freeze list: a copy of every parameter, to show after training that the frozen ones
  // are bit-identical and the others moved.
  if (!t.frozen.empty()) initial_.emplace(*t.engine);
}

void TrainingRun::begin_step() {
  if (!training_started_) {
    training_started_ = true;
    train_start_ = Clock::now();
  }
  step_start_ = Clock::now();
  for (double& v : micro_) v = 0;
}

void TrainingRun::add(const torch::Tensor& loss, const data::Batch* b, int64_t samples) {
  micro_[0] += loss.item<double>();
  if (b != nullptr) {
    micro_[1] += static_cast<double>(b->num_tokens);
    micro_[2] += static_cast<double>(b->num_padded_tokens);
    samples = b->batch_size();
  }
  micro_[3] += static_cast<double>(samples);
}

bool TrainingRun::prints(int64_t step) const {
  return step % t_.config.steps_per_print == 0 || step == 1 || step == args_.steps;
}

StepTotals TrainingRun::end_step(int64_t step, const Fields& extra,
                                 const std::function<std::string(const StepTotals&)>& progress) {
  // Over the batch group: under tensor parallelism the ranks of a tensor group hold one batch.
  std::vector<double> g =
      sum_over_ranks(*t_.engine->topology().batch, {micro_[0], micro_[1], micro_[2], micro_[3]});
  StepTotals s;
  s.step = step;
  s.seconds = seconds_since(step_start_);
  // The losses added are per data-parallel rank: either each rank's mean (the average of the
  // means), or under token_loss_scale (train/token_loss.h) a part of the step's token mean, which
  // the same division turns into that mean. The sp ranks of a sequence group add one batch's
  // samples each.
  const dist::Topology& topology = t_.engine->topology();
  s.loss = g[0] / static_cast<double>(t_.config.gradient_accumulation_steps *
                                      topology.data_parallel_size());
  s.tokens = g[1];
  s.padded = g[2];
  s.samples = g[3] / topology.sequence_parallel_size();
  total_tokens_ += s.tokens;
  total_padded_ += s.padded;
  total_samples_ += s.samples;
  train_seconds_ = seconds_since(train_start_);
  Engine& e = *t_.engine;
  Fields row = {{"step", double(step)}, {"loss", s.loss}, {"lr", e.get_lr()}};
  if (s.padded > 0) {
    append(row, {{"tokens_per_s", s.tokens / s.seconds},
                 {"tokens", s.tokens},
                 {"padded_tokens", s.padded},
                 {"padding_fraction", s.padding_fraction()}});
  }
  append(row, {{"samples_per_s", s.samples / s.seconds},
               {"loss_scale", e.loss_scale()},
               {"grad_norm", e.last_grad_norm()},
               {"model_state_bytes_per_rank", double(e.memory().model_state_bytes())},
               {"step_seconds", s.seconds}});
  const profile::StepFlops* flops = e.step_flops();
  if (flops != nullptr) {
    append(row,
           {{"model_flops_per_rank", flops->flops.model()}, {"tflops_per_rank", flops->tflops()}});
    if (flops->peak_tflops > 0) append(row, {{"mfu", flops->mfu()}});
  }
  append(row, extra);
  metrics_.write(row);
  if (t_.monitor) {  // the config's tensorboard / csv_monitor, x axis in samples as DeepSpeed's
    const auto x = static_cast<int64_t>(total_samples_);
    t_.monitor->write(x, kMonitorTrainLoss, s.loss);
    t_.monitor->write(x, kMonitorLr, e.get_lr());
    t_.monitor->write(x, kMonitorLossScale, e.loss_scale());
    t_.monitor->write(x, kMonitorGradNorm, e.last_grad_norm());
    t_.monitor->write(x, kMonitorSamples, total_samples_);
    if (s.padded > 0) t_.monitor->write(x, kMonitorTokensPerSecond, s.tokens / s.seconds);
    if (flops != nullptr) {
      t_.monitor->write(x, kMonitorTflops, flops->tflops());
      if (flops->peak_tflops > 0) t_.monitor->write(x, kMonitorMfu, flops->mfu());
    }
  }
  if (prints(step)) {
    std::string throughput;
    if (flops != nullptr) {
      throughput = detail::str(" | ", flops->tflops(), " TFLOP/s per rank");
      if (flops->peak_tflops > 0) throughput += detail::str(" | MFU ", 100 * flops->mfu(), "%");
    }
    ZT_LOG_INFO("step ", step, "/", args_.steps, " | loss ", s.loss,
                progress ? progress(s) : std::string(), throughput);
    report_comms(*t_.comm, t_.monitor.get(), static_cast<int64_t>(total_samples_),
                 "step " + std::to_string(step));
  }
  checkpoints_.after_step(step, step == args_.steps);
  return s;
}

std::vector<double> TrainingRun::evaluate(
    BatchStream& stream, int64_t max_batches, size_t num_sums,
    const std::function<void(const data::Batch&, double*)>& fn) {
  Engine& e = *t_.engine;
  e.eval();
  std::vector<double> sums(num_sums, 0.0);
  {
    torch::NoGradGuard no_grad;
    stream.restart();
    for (int64_t i = 0; max_batches <= 0 || i < max_batches; ++i) {
      auto b = stream.next();
      if (!b) break;
      e.forward([&] {
        fn(*b, sums.data());
        return torch::Tensor();
      });
    }
  }
  e.train();
  return sum_over_ranks(*t_.engine->topology().batch, sums);
}

ParameterChanges TrainingRun::check_frozen() {
  if (!initial_) return changes_;
  changes_ = initial_->compare(*t_.engine);
  ZT_LOG_INFO("after training: ", changes_.frozen_unchanged, "/", changes_.frozen,
              " frozen parameters bit-identical, ", changes_.trainable_changed, "/",
              changes_.trainable, " trainable parameters changed");
  ZT_CHECK(changes_.frozen_moved.empty(),
           "frozen parameters changed in training: ", join(changes_.frozen_moved));
  return changes_;
}

void TrainingRun::write_summary(const Fields& extra) {
  report_comms(*t_.comm, t_.monitor.get(), static_cast<int64_t>(total_samples_), "end of training");
  // The whole model's count: a parameter split over a tensor or expert group counts every slice.
  int64_t n_params = 0;
  const auto& split = t_.engine->options().tensor_split_params;
  for (const auto& p : t_.engine->model()->named_parameters()) {
    auto it = split.find(p.key());
    auto sl = t_.engine->tensor_slices().find(p.key());
    if (it == split.end() || sl == t_.engine->tensor_slices().end() ||
        p.value().size(it->second) == 0) {
      n_params += p.value().numel();
      continue;
    }
    const std::vector<int64_t>& slices = sl->second;
    n_params += p.value().numel() / p.value().size(it->second) *
                std::accumulate(slices.begin(), slices.end(), int64_t{0});
  }
  const double train_s = train_seconds_;
  Fields f = {{"steps", double(args_.steps)},
              {"world_size", double(t_.comm->size())},
              {"parameters", double(n_params)},
              {"train_seconds", train_s},
              {"total_seconds", seconds_since(start_)},
              {"samples_per_s", total_samples_ / train_s},
              {"model_state_bytes_per_rank", double(t_.engine->memory().model_state_bytes())},
              {"frozen_parameters", double(changes_.frozen)},
              {"frozen_unchanged", double(changes_.frozen_unchanged)},
              {"trainable_parameters", double(changes_.trainable)},
              {"trainable_changed", double(changes_.trainable_changed)}};
  if (total_padded_ > 0) {
    append(f, {{"tokens_per_s", total_tokens_ / train_s},
               {"padding_fraction", 1.0 - total_tokens_ / total_padded_}});
  }
  const GatherTraffic traffic = t_.engine->gather_traffic();
  if (traffic.gathered_bytes > 0) {
    // Stage 3, rank 0's gathers: the bytes rebuilt, and the experts no rank routed to, left out.
    append(f, {{"stage3_gathered_bytes", double(traffic.gathered_bytes)},
               {"stage3_unrouted_bytes", double(traffic.unrouted_bytes)}});
  }
  append(f, extra);
  MetricsLog summary(t_.comm->rank() == 0 ? args_.out_dir + "/summary.json" : "");
  summary.write(f);
}

}  // namespace zt::train
