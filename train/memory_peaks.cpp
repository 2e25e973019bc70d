#include "train/memory_peaks.h"

#include <dlfcn.h>
#include <sys/resource.h>

#include <c10/core/CachingDeviceAllocator.h>

#include "train/cpu_memory_meter.h"
#include "train/device.h"

namespace zt::train {
namespace {

// A function of the test device's C API (testdevice/backend.cpp), found in the library
// train/device.h loaded (locally, so by its name); null when it is not loaded.
template <typename Fn>
Fn test_device_function(const char* name) {
  void* handle = dlopen("libzt_testdevice.so", RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return nullptr;
  void* fn = dlsym(handle, name);
  dlclose(handle);  // NOLOAD took a reference; the library stays (RTLD_NODELETE)
  return reinterpret_cast<Fn>(fn);
}

}  // namespace

MemoryPeaks memory_peaks(const c10::Device& device) {
  MemoryPeaks p;
  if (device.is_privateuseone()) {
    if (auto f = test_device_function<int64_t (*)(int)>("zt_testdevice_max_memory_allocated")) {
      p.device = f(device.index());
    }
    if (auto f = test_device_function<int64_t (*)()>("zt_testdevice_max_pinned_bytes")) {
      p.pinned = f();
    }
  } else if (device.is_cuda()) {
    const c10::CachingDeviceAllocator::DeviceStats s =
        c10::getDeviceAllocator(c10::kCUDA)->getDeviceStats(device.index());
    p.device =
        s.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
  if (CpuMemoryMeter::installed()) p.host_tensors = CpuMemoryMeter::peak_bytes();
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  p.rss = static_cast<int64_t>(u.ru_maxrss) * 1024;
  return p;
}

int64_t live_bytes(const c10::Device& device) {
  if (device.is_privateuseone()) {
    auto f = test_device_function<int64_t (*)(int)>("zt_testdevice_memory_allocated");
    return f ? f(device.index()) : -1;
  }
  if (device.is_cuda()) {
    const c10::CachingDeviceAllocator::DeviceStats s =
        c10::getDeviceAllocator(c10::kCUDA)->getDeviceStats(device.index());
    return s.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
        .current;
  }
  return CpuMemoryMeter::installed() ? CpuMemoryMeter::live_bytes() : -1;
}

int64_t peak_bytes(const c10::Device& device) {
  if (device.is_cpu()) return CpuMemoryMeter::installed() ? CpuMemoryMeter::peak_bytes() : -1;
  return memory_peaks(device).device;
}

void reset_memory_peaks(const c10::Device& device) {
  if (device.is_privateuseone()) {
    if (auto f = test_device_function<void (*)(int)>("zt_testdevice_reset_peak_memory_allocated")) {
      f(device.index());
    }
    if (auto f = test_device_function<void (*)()>("zt_testdevice_reset_peak_pinned_bytes")) f();
  } else if (device.is_cuda()) {
    c10::getDeviceAllocator(c10::kCUDA)->resetPeakStats(device.index());
  }
  if (CpuMemoryMeter::installed()) CpuMemoryMeter::reset_peak();
}

}  // namespace zt::train
