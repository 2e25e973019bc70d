#pragma once
// Monitors: DeepSpeed's `tensorboard` and `csv_monitor` config blocks. The training loop (the
// engine or zt::initialize's loop helpers) calls write(step, name, value) with one scalar at a
// time; rank 0 writes, other ranks get a monitor that drops everything, so callers need not ask
// which rank they are.
//
// Names follow DeepSpeed's engine ("Train/Samples/train_loss", with the number of samples seen
// as the step), so dashboards built for DeepSpeed runs read ours unchanged; kMonitor* below are
// the names zerotorch writes.
//
//   auto monitor = zt::make_monitor(config, env.rank);
//   monitor->write(samples, zt::kMonitorTrainLoss, loss);
//   monitor->flush();  // also on destruction
//
// `wandb`, `comet` and `trackio` are config warnings (no network); see core/config/schema.h.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/config/config.h"

namespace zt {

inline constexpr const char* kMonitorTrainLoss = "Train/Samples/train_loss";
inline constexpr const char* kMonitorLr = "Train/Samples/lr";
inline constexpr const char* kMonitorLossScale = "Train/Samples/loss_scale";
inline constexpr const char* kMonitorGradNorm = "Train/Samples/grad_norm";
inline constexpr const char* kMonitorTokensPerSecond = "Train/Samples/tokens_per_second";
inline constexpr const char* kMonitorSamples = "Train/Samples/samples";
// With flops_profiler enabled (core/profile/flops_profiler.h): this rank's model TFLOP/s and MFU.
inline constexpr const char* kMonitorTflops = "Train/Samples/tflops_per_rank";
inline constexpr const char* kMonitorMfu = "Train/Samples/mfu";

class Monitor {
 public:
  virtual ~Monitor();
  // One scalar. Steps need not be consecutive; a name may be new at any step.
  virtual void write(int64_t step, const std::string& name, double value) = 0;
  // Makes everything written so far visible to readers (files flushed).
  virtual void flush() {}
};

// Every monitor `config` enables, for this rank (rank != 0: a monitor that drops everything).
// Directories are created; throws zt::Error naming the config key when one cannot be.
std::shared_ptr<Monitor> make_monitor(const Config& config, int rank);

// Writes to several monitors.
class MonitorList : public Monitor {
 public:
  void add(std::shared_ptr<Monitor> m) { monitors_.push_back(std::move(m)); }
  bool empty() const { return monitors_.empty(); }
  void write(int64_t step, const std::string& name, double value) override;
  void flush() override;

 private:
  std::vector<std::shared_ptr<Monitor>> monitors_;
};

// <output_path>/<job_name> as DeepSpeed's monitors build it (output_path "" = relative to the
// working directory).
std::string monitor_log_dir(const MonitorConfig& config);

}  // namespace zt
