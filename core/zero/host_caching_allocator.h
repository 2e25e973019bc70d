#pragma once
// A caching allocator for a CPU model's large host tensors.
//
// A training step allocates the same tensors, of the same sizes, in the same order, every step:
// the forward's activations, their gradients, the engine's gathered and gradient buffers. glibc's
// malloc serves them from its heap (its mmap threshold rises to the largest block freed, up to 32
// MiB), where the blocks freed every step leave holes the next step's do not always fit: the heap
// of a 20M-parameter decoder at ZeRO stage 3 grows to 1.5 times the most it ever has in use, and
// all of it stays resident. Mapping large blocks on their own instead (glibc's mmap_threshold
// tunable) ends the holes but faults every page in again every step.
//
// While a CPU engine exists this allocator is LibTorch's CPU allocator. A request in glibc's heap
// range (kHostCacheMinBytes up to kHostCacheMaxBytes) is rounded up to a size class (eight per
// power of two) and served with a block mapped from the kernel for it alone; a freed block is
// kept idle and handed to a later request, as CUDA's caching allocator does for device memory:
// the smallest idle block at least the request's class and at most kHostCacheMaxFit times it. In a
// steady step every such tensor reuses a block of the step before and no page is faulted in twice;
// when the shapes change from step to step (dynamic padding), a shorter batch reuses a longer
// one's blocks. Idle blocks are bounded twice:
// - live + idle bytes stay within kHostCacheMaxOverPeak times the most bytes live at once since
//   the engine was built (a request that finds no block frees idle ones, largest first);
// - end_of_host_cache_step() (Engine::step() at each optimizer step) frees the blocks no request
//   took since the call before: sizes of the past are let go.
// Other requests go to the default allocator (glibc), and so does everything once the last engine
// is gone. ZT_HOST_CACHE=0 leaves LibTorch's default allocator in place. The cached blocks are
// the cache's alone, where glibc's heap would lend a freed block's bytes to requests of any size:
// where a step's transient tensors are a small part of its memory (a 680M-parameter GPT at stage
// 3), peak RSS is up to ~3% higher than with glibc (bench/capacity/README.md).

#include <cstddef>
#include <cstdint>

namespace zt::zero {

struct HostCacheStats {
  int64_t allocations = 0;  // blocks mapped
  int64_t reuses = 0;       // requests served from an idle block
  size_t live_bytes = 0;    // blocks handed out and not yet freed (whole blocks)
  size_t idle_bytes = 0;    // blocks kept for reuse
  size_t peak_live_bytes = 0;
};

// glibc's own range for a block it may keep in its heap: its mmap threshold starts at 128 KiB and
// rises, with the blocks freed, up to 32 MiB. Larger blocks it maps on their own and unmaps when
// freed, which leaves no holes.
constexpr size_t kHostCacheMinBytes = size_t{128} << 10;
constexpr size_t kHostCacheMaxBytes = size_t{32} << 20;
// Measured on a 20M-parameter decoder at ZeRO stages 2-3 (bench/peers/README.md): with these two
// a fixed-shape step faults no page in after the first, and a step whose sequence length changes
// every time peaks below glibc's malloc at the same speed. Exact reuse only would need 1.4 times
// the peak in use; a looser bound (1.5) or fit (4) held more memory than glibc.
constexpr size_t kHostCacheMaxFit = 2;
constexpr double kHostCacheMaxOverPeak = 1.25;

// The bytes a request of n is served with: n below kHostCacheMinBytes, else n rounded up to a
// multiple of an eighth of the power of two at or below it.
size_t host_cache_class(size_t n);

// Installs the caching allocator as LibTorch's CPU allocator (the first holder) or counts one
// more holder; each calls release_host_cache() once.
void acquire_host_cache();
// The last holder restores the CPU allocator installed before and frees the idle blocks; live
// blocks are unmapped when their tensors free them.
void release_host_cache();
// Frees the idle blocks that no request took since the previous call.
void end_of_host_cache_step();
// Frees every idle block; the peak live bytes start again from what is live now (a CPU engine
// calls it when built: construction's own transient buffers are not a step's).
void empty_host_cache();
bool host_cache_installed();
HostCacheStats host_cache_stats();

}  // namespace zt::zero
