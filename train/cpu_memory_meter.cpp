#include "train/cpu_memory_meter.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

namespace zt::train {
namespace {

std::atomic<int64_t> g_live{0};
std::atomic<int64_t> g_peak{0};
std::atomic<bool> g_installed{false};

void raise_peak(int64_t now) {
  int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

// LibTorch's raw_allocate/raw_deallocate (used by some kernels) need a DataPtr whose context is
// its data pointer and a fixed deleter taking that pointer, so the byte count of a live
// allocation is kept in a table rather than in a context object.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    if (data == nullptr) return inner;  // n == 0: nothing to count
    {
      std::lock_guard<std::mutex> lock(mutex_);
      live_[data] = Entry{std::move(inner), static_cast<int64_t>(n)};
    }
    raise_peak(g_live.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed) +
               static_cast<int64_t>(n));
    return c10::DataPtr(data, data, &delete_counted, device);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &delete_counted; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  static CountingAllocator* instance;

 private:
  struct Entry {
    c10::DataPtr inner;
    int64_t bytes = 0;
  };

  static void delete_counted(void* data) {
    Entry e;
    {
      std::lock_guard<std::mutex> lock(instance->mutex_);
      auto it = instance->live_.find(data);
      if (it == instance->live_.end()) return;
      e = std::move(it->second);
      instance->live_.erase(it);
    }
    g_live.fetch_sub(e.bytes, std::memory_order_relaxed);
    // e.inner frees the memory through the inner allocator as it goes out of scope.
  }

  c10::Allocator* inner_;
  std::mutex mutex_;
  std::unordered_map<void*, Entry> live_;
};

CountingAllocator* CountingAllocator::instance = nullptr;

}  // namespace

void CpuMemoryMeter::install() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Leaked on purpose: storages made through it may outlive every static destructor.
    CountingAllocator::instance = new CountingAllocator(c10::GetDefaultCPUAllocator());
  });
  if (g_installed.exchange(true)) return;
  c10::SetCPUAllocator(CountingAllocator::instance, /*priority=*/100);
}

void CpuMemoryMeter::uninstall() {
  if (!g_installed.exchange(false)) return;
  // Storages counted so far keep their deleter (the instance stays), so their bytes still leave
  // the count when freed.
  c10::SetCPUAllocator(c10::GetDefaultCPUAllocator(), /*priority=*/100);
}

CpuMemoryMeter::Scope::Scope() : installed_here_(!installed()) {
  install();
}

CpuMemoryMeter::Scope::~Scope() {
  if (installed_here_) uninstall();
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

}  // namespace zt::train
