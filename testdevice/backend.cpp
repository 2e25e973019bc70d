// The zttest backend's name, and the C API a program that only dlopen'ed the library calls
// (test_device.h wraps it): a loader's check and the memory counters.

#include <cstdint>

#include <c10/core/DeviceType.h>

#include "testdevice/allocator.h"
#include "testdevice/pinned_allocator.h"
#include "testdevice/test_device.h"

namespace zt::testdevice {
namespace {

// Before anything can name the device: at::Device("zttest:0") parses once this has run.
[[maybe_unused]] const bool backend_registered = [] {
  c10::register_privateuse1_backend(kBackendName);
  return true;
}();

}  // namespace
}  // namespace zt::testdevice

extern "C" {

int zt_testdevice_device_count() {
  return zt::testdevice::kDeviceCount;
}

int64_t zt_testdevice_memory_allocated(int device) {
  return zt::testdevice::allocated_bytes(static_cast<c10::DeviceIndex>(device));
}

int64_t zt_testdevice_max_memory_allocated(int device) {
  return zt::testdevice::peak_allocated_bytes(static_cast<c10::DeviceIndex>(device));
}

void zt_testdevice_reset_peak_memory_allocated(int device) {
  zt::testdevice::reset_peak_allocated_bytes(static_cast<c10::DeviceIndex>(device));
}

int64_t zt_testdevice_pinned_bytes() {
  return zt::testdevice::live_pinned_bytes();
}

int64_t zt_testdevice_max_pinned_bytes() {
  return zt::testdevice::peak_pinned_bytes();
}

void zt_testdevice_reset_peak_pinned_bytes() {
  zt::testdevice::reset_pinned_peak();
}

}  // extern "C"
