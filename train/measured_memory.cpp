#include "train/measured_memory.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "train/cpu_memory_meter.h"
#include "train/memory_peaks.h"
#include "train/rank_sum.h"

namespace zt::train {

StepPeak::StepPeak(bool on) : on_(on) {
  if (on_) CpuMemoryMeter::install();
}

void StepPeak::begin() {
  live_before_ = CpuMemoryMeter::live_bytes();
  CpuMemoryMeter::reset_peak();
}

Fields StepPeak::end() {
  const int64_t extra = CpuMemoryMeter::peak_bytes() - live_before_;
  max_ = std::max(max_, extra);
  return {{"step_peak_extra_bytes", on_ ? double(extra) : NAN}};
}

double StepPeak::max() const {
  return on_ ? double(max_) : NAN;
}

Fields largest_peaks(Training& t) {
  if (!CpuMemoryMeter::installed()) return {};
  const MemoryPeaks p = memory_peaks(t.device);
  const int n = t.comm->size(), r = t.comm->rank();
  const MemoryReport m = t.engine->memory();
  const std::vector<double> mine = {double(p.device),     double(p.host_tensors),
                                    double(p.pinned),     double(p.rss),
                                    double(m.nvme_bytes), double(m.nvme_buffer_bytes)};
  std::vector<double> all(mine.size() * n, 0.0);
  for (size_t i = 0; i < mine.size(); ++i) all[i * n + r] = mine[i];
  all = sum_over_ranks(*t.comm, all);
  const char* names[] = {"peak_device_bytes",  "peak_host_tensor_bytes", "peak_pinned_bytes",
                         "peak_rss_bytes_max", "nvme_bytes_max",         "nvme_buffer_bytes_max"};
  Fields out;
  for (size_t i = 0; i < mine.size(); ++i) {
    out.push_back({names[i], *std::max_element(all.begin() + i * n, all.begin() + (i + 1) * n)});
  }
  return out;
}

Fields plan_fields(const plan::MemoryPlan& planned) {
  Fields out;
  for (int place = 0; place < plan::kPlaces; ++place) {
    out.push_back({std::string("plan_") + plan::to_string(plan::Place(place)) + "_bytes",
                   double(planned.peak[static_cast<size_t>(place)])});
  }
  return out;
}

}  // namespace zt::train
