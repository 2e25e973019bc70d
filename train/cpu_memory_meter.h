#pragma once
// CpuMemoryMeter: exact accounting of LibTorch's CPU tensor memory, for measuring what a
// training step holds (activations saved for backward, gathered stage-3 parameters, gradients).
// Peak RSS cannot show this on CPU: glibc keeps freed pages, so RSS only ever grows.
//
// install() wraps LibTorch's CPU allocator (c10::SetCPUAllocator) in a counting one: every CPU
// tensor storage allocated afterwards adds its bytes to `live` while it exists. Storages made
// before install() are not seen (count deltas, not absolutes). The wrapper stays until
// uninstall(); it costs a mutex-guarded table insert and erase per allocation (a measuring tool,
// not for production runs).
//
//   CpuMemoryMeter::install();
//   CpuMemoryMeter::reset_peak();                 // peak := live
//   ... forward, backward ...
//   int64_t held = CpuMemoryMeter::peak_bytes() - before;

#include <cstdint>

namespace zt::train {

class CpuMemoryMeter {
 public:
  // Idempotent; call before building the model so its tensors are counted too.
  static void install();
  // Puts LibTorch's default CPU allocator back (a measurement over; idempotent).
  static void uninstall();
  // Installed for a scope: uninstalled at its end unless it was installed before.
  class Scope {
   public:
    Scope();
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    bool installed_here_;
  };
  static bool installed();
  // Bytes of CPU tensor storage alive now, and the most alive at once since reset_peak().
  static int64_t live_bytes();
  static int64_t peak_bytes();
  static void reset_peak();
};

}  // namespace zt::train
