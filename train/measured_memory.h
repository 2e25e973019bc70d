#pragma once
// What a program's --measure-memory writes to summary.json, for checking a memory plan
// (core/plan/memory_plan.h) against a run: the largest rank's high-water marks since start
// (train/memory_peaks.h), its NVMe bytes and swap buffers (host memory that is no tensor), the
// plan's peaks, and per optimizer step the most CPU tensor bytes above the step's start.
//
// The CPU tensor bytes are counted only once CpuMemoryMeter (train/cpu_memory_meter.h) is
// installed: a program makes its StepPeak first thing, before it allocates.

#include <cstdint>

#include "core/plan/memory_plan.h"
#include "train/initialize.h"
#include "train/training_run.h"

namespace zt::train {

// Per optimizer step: the peak of CPU tensor bytes above what was live at begin(), and the
// largest over the run. Off, it measures nothing.
class StepPeak {
 public:
  explicit StepPeak(bool on);
  void begin();
  // The metrics field of the step that ends (null when off).
  Fields end();
  double max() const;

 private:
  bool on_;
  int64_t live_before_ = 0, max_ = 0;
};

// peak_device_bytes, peak_host_tensor_bytes, peak_pinned_bytes, peak_rss_bytes_max,
// nvme_bytes_max and nvme_buffer_bytes_max: each the largest over the ranks (collective over the
// job's ranks); empty when the meter is not installed.
Fields largest_peaks(Training& t);

// plan_device_bytes, plan_host_bytes, plan_pinned_bytes, plan_nvme_bytes.
Fields plan_fields(const plan::MemoryPlan& planned);

}  // namespace zt::train
