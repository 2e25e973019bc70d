#include "core/zero/host_caching_allocator.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <pthread.h>
#include <sys/mman.h>
#include <unordered_map>
#include <utility>
#include <vector>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

namespace zt::zero {
namespace {

// Above the default CPU allocator's priority (0), so that LibTorch's CPU tensors come from here.
constexpr uint8_t kPriority = 1;

void* map_block(size_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  // The error type LibTorch's default CPU allocator throws (torch.OutOfMemoryError in Python).
  TORCH_CHECK_WITH(OutOfMemoryError, p != MAP_FAILED,
                   "zerotorch host cache: can't allocate memory: you tried to allocate ", n,
                   " bytes (", std::strerror(errno), ")");
  return p;
}

void unmap_block(void* p, size_t n) {
  munmap(p, n);
}

using Blocks = std::vector<std::pair<void*, size_t>>;

void unmap_all(const Blocks& blocks) {
  for (const auto& [p, n] : blocks) unmap_block(p, n);
}

class HostCachingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    if (n < kHostCacheMinBytes || n >= kHostCacheMaxBytes) {
      return c10::GetDefaultCPUAllocator()->allocate(n);
    }
    const size_t size = host_cache_class(n);
    void* p = take_idle(size);
    if (p == nullptr) {
      p = map_block(size);  // outside the lock: the kernel may take its time
      unmap_all(add_mapped(p, size));
    }
    return {p, p, &HostCachingAllocator::free_block, c10::Device(c10::DeviceType::CPU)};
  }

  // raw_allocate hands out the data pointer itself, so every block comes back through here,
  // and so does the default allocator's small ones (raw_deallocate through this allocator).
  c10::DeleterFnPtr raw_deleter() const override { return &HostCachingAllocator::free_block; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  static void free_block(void* p) { instance().give(p); }

  void acquire() {
    const std::lock_guard<std::mutex> lock(mu_);
    if (holders_++ > 0) return;
    previous_ = c10::GetCPUAllocator();
    c10::SetCPUAllocator(this, kPriority);
  }

  void release() {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      if (holders_ == 0 || --holders_ > 0) return;
      c10::SetCPUAllocator(previous_, kPriority);
    }
    empty();
  }

  void end_of_step() {
    Blocks stale;
    {
      const std::lock_guard<std::mutex> lock(mu_);
      for (auto it = idle_.begin(); it != idle_.end();) {
        if (it->second.taken < epoch_) {
          stale.emplace_back(it->second.p, it->first);
          stats_.idle_bytes -= it->first;
          it = idle_.erase(it);
        } else {
          ++it;
        }
      }
      ++epoch_;
    }
    unmap_all(stale);
  }

  void empty() {
    Blocks idle;
    {
      const std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [n, block] : idle_) idle.emplace_back(block.p, n);
      idle_.clear();
      stats_.idle_bytes = 0;
      stats_.peak_live_bytes = stats_.live_bytes;
    }
    unmap_all(idle);
  }

  bool installed() {
    const std::lock_guard<std::mutex> lock(mu_);
    return holders_ > 0;
  }

  HostCacheStats stats() {
    const std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  // Never destroyed: tensors freed at exit, after static destructors, still come back here.
  static HostCachingAllocator& instance() {
    static HostCachingAllocator* const a = [] {
      auto* created = new HostCachingAllocator();
      // A child forked while another thread held the lock (a DataLoader worker forked during a
      // gradient reduction) would wait for it forever.
      pthread_atfork([] { instance().mu_.lock(); }, [] { instance().mu_.unlock(); },
                     [] { instance().mu_.unlock(); });
      return created;
    }();
    return *a;
  }

 private:
  struct Idle {
    void* p;
    uint64_t taken;  // the epoch of its last request
  };

  void* take_idle(size_t size) {
    const std::lock_guard<std::mutex> lock(mu_);
    // The smallest idle block that fits, if it is at most kHostCacheMaxFit times the class.
    auto it = idle_.lower_bound(size);
    if (it == idle_.end() || it->first > kHostCacheMaxFit * size) return nullptr;
    void* p = it->second.p;
    const size_t got = it->first;
    idle_.erase(it);
    stats_.idle_bytes -= got;
    note_live(p, got);
    ++stats_.reuses;
    return p;
  }

  // A newly mapped block is live; returns the idle blocks it pushed over the bound.
  Blocks add_mapped(void* p, size_t size) {
    Blocks evicted;
    const std::lock_guard<std::mutex> lock(mu_);
    note_live(p, size);
    ++stats_.allocations;
    const double bound = kHostCacheMaxOverPeak * static_cast<double>(stats_.peak_live_bytes);
    while (!idle_.empty() && static_cast<double>(stats_.live_bytes + stats_.idle_bytes) > bound) {
      auto largest = std::prev(idle_.end());
      evicted.emplace_back(largest->second.p, largest->first);
      stats_.idle_bytes -= largest->first;
      idle_.erase(largest);
    }
    return evicted;
  }

  void note_live(void* p, size_t size) {
    live_.emplace(p, Live{size, epoch_});
    stats_.live_bytes += size;
    stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, stats_.live_bytes);
  }

  void give(void* p) {
    if (p == nullptr) return;
    size_t unmap = 0;
    {
      const std::lock_guard<std::mutex> lock(mu_);
      auto it = live_.find(p);
      if (it != live_.end()) {
        const Live block = it->second;
        live_.erase(it);
        stats_.live_bytes -= block.size;
        if (holders_ > 0) {
          stats_.idle_bytes += block.size;
          idle_.emplace(block.size, Idle{p, block.taken});
          return;
        }
        unmap = block.size;
      }
    }
    if (unmap > 0) {
      unmap_block(p, unmap);
    } else {
      c10::GetDefaultCPUAllocator()->raw_deallocate(p);  // a small block: the default's
    }
  }

  struct Live {
    size_t size;
    uint64_t taken;
  };

  std::mutex mu_;
  std::unordered_map<void*, Live> live_;
  std::multimap<size_t, Idle> idle_;
  HostCacheStats stats_;
  uint64_t epoch_ = 0;
  int holders_ = 0;
  c10::Allocator* previous_ = nullptr;
};

}  // namespace

size_t host_cache_class(size_t n) {
  if (n < kHostCacheMinBytes) return n;
  size_t power = kHostCacheMinBytes;
  while (power <= n / 2) power *= 2;
  const size_t step = power / 8;
  return (n + step - 1) / step * step;
}

void acquire_host_cache() {
  HostCachingAllocator::instance().acquire();
}
void release_host_cache() {
  HostCachingAllocator::instance().release();
}
void end_of_host_cache_step() {
  HostCachingAllocator::instance().end_of_step();
}
void empty_host_cache() {
  HostCachingAllocator::instance().empty();
}
bool host_cache_installed() {
  return HostCachingAllocator::instance().installed();
}
HostCacheStats host_cache_stats() {
  return HostCachingAllocator::instance().stats();
}

}  // namespace zt::zero
