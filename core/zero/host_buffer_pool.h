#pragma once
// The host memory of a CPU model's per-step ZeRO buffers: at stage 3 every unit's gathered full
// buffer (forward, and again in backward), at stages 2-3 every flat buffer's gradient staging and
// its gradient shard (held from its first reduce-scatter to the step). Each is needed for a part
// of the step only. Taken from malloc and handed back each time, they cost fresh pages (faulted in
// and zeroed by the kernel) whenever glibc maps them on their own; and a gradient shard kept all
// step long sits through the forward, whose activations make the step's memory peak.
//
// The pool hands a released block to the next buffer of exactly its size (a model's units are
// mostly the same size: its decoder layers), so forward and backward each reuse a few blocks
// unit after unit. The engine trims it at the end of every step() call: between steps the blocks
// are malloc's again, free for the forward's activations. Idle blocks are kept only while live +
// idle bytes stay within the most bytes ever live at once. A GPU model does not use it (CUDA's
// caching allocator pools device memory).

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_set>

#include <c10/core/Allocator.h>

namespace zt::zero {

class HostBufferPool {
 public:
  struct Stats {
    int64_t allocations = 0;  // blocks taken from the allocator
    int64_t reuses = 0;       // blocks handed out again from the pool
    size_t live_bytes = 0;    // handed out and not yet given back
    size_t idle_bytes = 0;    // held for reuse
    size_t peak_live_bytes = 0;
  };

  // nbytes from an idle block of exactly that size, else from `allocator`; a new block first frees
  // idle ones (largest first) until live + idle bytes are within the peak again.
  at::DataPtr take(size_t nbytes, c10::Allocator& allocator);
  // Gives back a block take() handed out (nbytes: what was asked for), to be kept idle. A block
  // the pool did not hand out (a buffer's first bytes, from its allocator) is freed.
  void give(at::DataPtr block, size_t nbytes);
  // Frees every idle block (the engine, at the end of each step() call).
  void trim();
  Stats stats() const;

 private:
  mutable std::mutex mu_;
  std::multimap<size_t, at::DataPtr> idle_;
  std::unordered_set<void*> handed_out_;
  Stats stats_;
};

}  // namespace zt::zero
