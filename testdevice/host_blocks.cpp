#include "testdevice/host_blocks.h"

#include <cstdlib>

#include <c10/util/Exception.h>

namespace zt::testdevice {

void* HostBlocks::allocate(size_t nbytes, int owner, const char* what) {
  const size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  void* ptr = std::aligned_alloc(kAlignment, rounded);
  TORCH_CHECK_WITH(OutOfMemoryError, ptr != nullptr, what, ": not enough memory: you tried to ",
                   "allocate ", nbytes, " bytes.");
  std::lock_guard<std::mutex> lock(mutex_);
  blocks_[reinterpret_cast<uintptr_t>(ptr)] = HostBlock{nbytes, owner};
  return ptr;
}

HostBlock HostBlocks::release(void* ptr) {
  HostBlock block;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
    TORCH_INTERNAL_ASSERT(it != blocks_.end(), "zttest: freeing a block not allocated here");
    block = it->second;
    blocks_.erase(it);
  }
  std::free(ptr);
  return block;
}

std::optional<HostBlock> HostBlocks::find(const void* p) const {
  const auto address = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.upper_bound(address);
  if (it == blocks_.begin()) {
    return std::nullopt;
  }
  --it;
  if (address >= it->first + it->second.nbytes) {
    return std::nullopt;
  }
  return it->second;
}

}  // namespace zt::testdevice
