#pragma once
// The high-water marks a memory plan (core/plan/memory_plan.h) is checked against, per rank:
//
//   device        the device allocator's most bytes allocated at once (the test device's own
//                 count; CUDA's caching allocator's allocated-bytes peak); -1 on the CPU
//   host_tensors  the most bytes of CPU tensor storage alive at once (cpu_memory_meter.h, when
//                 installed; -1 otherwise): on a CPU model the model's own memory, beside a
//                 device the offloaded parts
//   pinned        the most pinned host bytes at once (the test device's pinned allocator); -1
//                 where not counted (the CPU, and CUDA, whose pinned buffers the engine registers
//                 itself)
//   rss           the process's peak resident set (getrusage), the runtime's own pages included
//
// reset_memory_peaks() starts every count from what is alive now.

#include <cstdint>

#include <c10/core/Device.h>

namespace zt::train {

struct MemoryPeaks {
  int64_t device = -1;
  int64_t host_tensors = -1;
  int64_t pinned = -1;
  int64_t rss = 0;
};

MemoryPeaks memory_peaks(const c10::Device& device);
// Bytes alive now where `device`'s tensors live: its allocator's count, or on the CPU the CPU
// tensor bytes (cpu_memory_meter.h; -1 when the meter is not installed).
int64_t live_bytes(const c10::Device& device);
// The most bytes alive at once there since reset_memory_peaks.
int64_t peak_bytes(const c10::Device& device);
void reset_memory_peaks(const c10::Device& device);

}  // namespace zt::train
