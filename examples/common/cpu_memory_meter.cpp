#include "examples/common/cpu_memory_meter.h"

#include <atomic>
#include <cstring>
#include <mutex>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

namespace zt::examples {
namespace {

std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};
std::atomic<bool> g_installed{false};

void raise_peak(int64_t now) {
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

// Owns the inner allocator's DataPtr; deleting it frees the memory and uncounts it.
struct Counted {
  c10::DataPtr inner;
  int64_t bytes;
};

void delete_counted(void* ctx) {
  auto* c = static_cast<Counted*>(ctx);
  g_live.fetch_sub(c->bytes, std::memory_order_relaxed);
  delete c;
}

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    auto* ctx = new Counted{std::move(inner), static_cast<int64_t>(n)};
    raise_peak(g_live.fetch_add(ctx->bytes, std::memory_order_relaxed) + ctx->bytes);
    return c10::DataPtr(data, ctx, &delete_counted, device);
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

 private:
  c10::Allocator* inner_;
};

}  // namespace

void CpuMemoryMeter::install() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Leaked on purpose: storages made through it may outlive every static destructor.
    static auto* counting = new CountingAllocator(c10::GetDefaultCPUAllocator());
    c10::SetCPUAllocator(counting, /*priority=*/100);
    g_installed = true;
  });
}

bool CpuMemoryMeter::installed() {
  return g_installed;
}

int64_t CpuMemoryMeter::live_bytes() {
  return g_live.load(std::memory_order_relaxed);
}

int64_t CpuMemoryMeter::peak_bytes() {
  return g_peak.load(std::memory_order_relaxed);
}

void CpuMemoryMeter::reset_peak() {
  g_peak.store(g_live.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace zt::examples
