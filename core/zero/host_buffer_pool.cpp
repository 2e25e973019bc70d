#include "core/zero/host_buffer_pool.h"

#include <algorithm>
#include <utility>

namespace zt::zero {

at::DataPtr HostBufferPool::take(size_t nbytes, c10::Allocator& allocator) {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    auto it = idle_.find(nbytes);
    if (it != idle_.end()) {
      at::DataPtr block = std::move(it->second);
      idle_.erase(it);
      stats_.idle_bytes -= nbytes;
      stats_.live_bytes += nbytes;
      ++stats_.reuses;
      handed_out_.insert(block.get());
      return block;
    }
  }
  at::DataPtr block = allocator.allocate(nbytes);  // outside the lock: it may fault pages in
  const std::lock_guard<std::mutex> lock(mu_);
  stats_.live_bytes += nbytes;
  stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, stats_.live_bytes);
  ++stats_.allocations;
  handed_out_.insert(block.get());
  // Blocks of other sizes that no longer fit under the peak make room for this one.
  while (!idle_.empty() && stats_.live_bytes + stats_.idle_bytes > stats_.peak_live_bytes) {
    auto largest = std::prev(idle_.end());
    stats_.idle_bytes -= largest->first;
    idle_.erase(largest);
  }
  return block;
}

void HostBufferPool::give(at::DataPtr block, size_t nbytes) {
  if (!block) return;
  const std::lock_guard<std::mutex> lock(mu_);
  if (handed_out_.erase(block.get()) == 0) return;  // not ours: freed as it goes out of scope
  // Live bytes become idle ones: their sum, kept within the peak by take(), does not change.
  stats_.live_bytes -= nbytes;
  stats_.idle_bytes += nbytes;
  idle_.emplace(nbytes, std::move(block));
}

void HostBufferPool::trim() {
  std::multimap<size_t, at::DataPtr> idle;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    idle.swap(idle_);
    stats_.idle_bytes = 0;
  }
  // The blocks are freed here, outside the lock.
}

HostBufferPool::Stats HostBufferPool::stats() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace zt::zero
