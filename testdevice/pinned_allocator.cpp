#include "testdevice/pinned_allocator.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "testdevice/host_blocks.h"
#include "testdevice/stream_order.h"

namespace zt::testdevice {
namespace {

HostBlocks& pinned_blocks() {
  static auto* blocks = new HostBlocks();  // leaked: storages may be freed after static teardown
  return *blocks;
}

// Live and peak pinned bytes, as the device allocator counts its own (allocator.cpp).
struct PinnedStats {
  std::mutex mu;
  std::unordered_map<const void*, int64_t> sizes;
  int64_t live = 0, peak = 0;
};

PinnedStats& pinned_stats() {
  static auto* stats = new PinnedStats();  // leaked, as the blocks above
  return *stats;
}

void free_pinned_memory(void* ptr) {
  // Copies still queued from or into it run first (CUDA's pinned allocator keeps a block until
  // the streams that use it are done).
  if (const std::optional<HostBlock> live = pinned_blocks().find(ptr)) {
    complete_touching(ptr, live->nbytes);
  }
  {
    PinnedStats& s = pinned_stats();
    const std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.sizes.find(ptr);
    if (it != s.sizes.end()) {
      s.live -= it->second;
      s.sizes.erase(it);
    }
  }
  pinned_blocks().release(ptr);
}

class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (nbytes == 0) {
      return c10::DataPtr(nullptr, nullptr, nullptr, cpu);
    }
    void* ptr = pinned_blocks().allocate(nbytes, /*owner=*/-1, "zttest pinned host allocator");
    PinnedStats& s = pinned_stats();
    const std::lock_guard<std::mutex> lock(s.mu);
    s.sizes[ptr] = static_cast<int64_t>(nbytes);
    s.live += static_cast<int64_t>(nbytes);
    s.peak = std::max(s.peak, s.live);
    return c10::DataPtr(ptr, ptr, &free_pinned_memory, cpu);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned_memory; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

}  // namespace

c10::Allocator* pinned_allocator() {
  static auto* allocator = new PinnedAllocator();
  return allocator;
}

int64_t live_pinned_bytes() {
  PinnedStats& s = pinned_stats();
  const std::lock_guard<std::mutex> lock(s.mu);
  return s.live;
}

int64_t peak_pinned_bytes() {
  PinnedStats& s = pinned_stats();
  const std::lock_guard<std::mutex> lock(s.mu);
  return s.peak;
}

void reset_pinned_peak() {
  PinnedStats& s = pinned_stats();
  const std::lock_guard<std::mutex> lock(s.mu);
  s.peak = s.live;
}

bool is_pinned_pointer(const void* p) {
  return p != nullptr && pinned_blocks().find(p);
}

}  // namespace zt::testdevice
