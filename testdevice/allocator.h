#pragma once
// zttest device memory: host memory (host_blocks.h), allocated on the calling thread's current
// device (device_guard.h) as CUDA's allocator does, so a kernel or a storage refill that forgot
// its c10::DeviceGuard lands on the wrong device here too. Registered with
// c10::SetAllocator(PrivateUse1) when the library loads; every zttest storage's allocator.
//
// New memory is filled with 0xFF bytes (NaN in floating types, -1 in integers) rather than left
// as fresh host pages, which are zero: code that reads memory it never wrote gets garbage, as on
// a GPU, not zeros that happen to be right. Live bytes are counted per device, with the peak.

#include <cstdint>
#include <optional>

#include <c10/core/Allocator.h>

namespace zt::testdevice {

// The PrivateUse1 allocator (the one registered).
c10::Allocator* device_allocator();

// Live bytes on a device, the most since load or the last reset, and the reset.
int64_t allocated_bytes(c10::DeviceIndex device);
int64_t peak_allocated_bytes(c10::DeviceIndex device);
void reset_peak_allocated_bytes(c10::DeviceIndex device);

// The device whose memory holds address p (anywhere in a live block), if any.
std::optional<c10::DeviceIndex> device_of_pointer(const void* p);

}  // namespace zt::testdevice
