#pragma once
// The flops_profiler block as the engine takes it (core/profile/flops_profiler.h says what each
// field does); apart so that core/engine_options.h stays light.

#include <cstdint>
#include <string>

namespace zt::profile {

struct FlopsProfilerOptions {
  bool enabled = false;
  int64_t profile_step = 1;
  int module_depth = -1;
  int top_modules = 1;
  bool detailed = true;
  std::string output_file;  // empty: the log
  // The device's peak TFLOP/s for MFU; 0: the table's figure for the device and dtype.
  double peak_tflops = 0;
  // For the report's batch size and samples/second (train_micro_batch_size_per_gpu).
  int64_t micro_batch_size = 0;
};

}  // namespace zt::profile
