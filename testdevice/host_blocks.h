#pragma once
// A table of live host memory blocks, for the zttest allocators (allocator.h,
// pinned_allocator.h): both must answer "which block, if any, holds this address", for any
// address inside a block, as cudaPointerGetAttributes does (getDeviceFromPtr, isPinnedPtr).

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

namespace zt::testdevice {

// Blocks are kAlignment-aligned, the alignment of LibTorch's CPU allocator, so the CPU kernels
// the device runs see the same alignment as on the host.
constexpr size_t kAlignment = 64;

struct HostBlock {
  size_t nbytes = 0;
  int owner = 0;  // what the allocator records: the device index, for device memory
};

class HostBlocks {
 public:
  // Allocates nbytes > 0 (throws c10::OutOfMemoryError, naming `what`, when the host has not
  // got them) and records the block as owned by `owner`.
  void* allocate(size_t nbytes, int owner, const char* what);
  // Frees a block allocated here and returns what was recorded for it.
  HostBlock release(void* ptr);
  // The block that holds address p, if any.
  std::optional<HostBlock> find(const void* p) const;

 private:
  mutable std::mutex mutex_;
  std::map<uintptr_t, HostBlock> blocks_;  // by start address
};

}  // namespace zt::testdevice
