#include "testdevice/allocator.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>

#include <c10/util/Exception.h>

#include "testdevice/device_guard.h"
#include "testdevice/host_blocks.h"
#include "testdevice/stream_order.h"
#include "testdevice/test_device.h"

namespace zt::testdevice {
namespace {

constexpr unsigned char kPoison = 0xFF;

struct DeviceMemoryStats {
  int64_t allocated = 0;
  int64_t peak = 0;
};

HostBlocks& device_blocks() {
  static auto* blocks = new HostBlocks();  // leaked: storages may be freed after static teardown
  return *blocks;
}

std::mutex stats_mutex;
std::array<DeviceMemoryStats, kDeviceCount> device_stats;

void free_device_memory(void* ptr) {
  // Copies still queued on it run first, as a caching allocator keeps memory for a stream's
  // pending work (recordStream).
  if (const std::optional<HostBlock> live = device_blocks().find(ptr)) {
    complete_touching(ptr, live->nbytes);
  }
  const HostBlock block = device_blocks().release(ptr);
  std::lock_guard<std::mutex> lock(stats_mutex);
  device_stats[block.owner].allocated -= static_cast<int64_t>(block.nbytes);
}

class DeviceAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::DeviceIndex device = current_device();
    const c10::Device where(kDeviceType, device);
    if (nbytes == 0) {
      return c10::DataPtr(nullptr, nullptr, nullptr, where);
    }
    void* ptr = device_blocks().allocate(nbytes, device, "zttest device allocator");
    std::memset(ptr, kPoison, nbytes);
    {
      std::lock_guard<std::mutex> lock(stats_mutex);
      DeviceMemoryStats& stats = device_stats[device];
      stats.allocated += static_cast<int64_t>(nbytes);
      stats.peak = std::max(stats.peak, stats.allocated);
    }
    return c10::DataPtr(ptr, ptr, &free_device_memory, where);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_device_memory; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

DeviceAllocator* the_allocator() {
  static auto* allocator = new DeviceAllocator();
  return allocator;
}

const c10::AllocatorRegisterer<c10::DeviceType::PrivateUse1> register_device_allocator(
    the_allocator());

}  // namespace

c10::Allocator* device_allocator() {
  return the_allocator();
}

int64_t allocated_bytes(c10::DeviceIndex device) {
  check_device_index(device);
  std::lock_guard<std::mutex> lock(stats_mutex);
  return device_stats[device].allocated;
}

int64_t peak_allocated_bytes(c10::DeviceIndex device) {
  check_device_index(device);
  std::lock_guard<std::mutex> lock(stats_mutex);
  return device_stats[device].peak;
}

void reset_peak_allocated_bytes(c10::DeviceIndex device) {
  check_device_index(device);
  std::lock_guard<std::mutex> lock(stats_mutex);
  device_stats[device].peak = device_stats[device].allocated;
}

std::optional<c10::DeviceIndex> device_of_pointer(const void* p) {
  const std::optional<HostBlock> block = device_blocks().find(p);
  if (!block) {
    return std::nullopt;
  }
  return static_cast<c10::DeviceIndex>(block->owner);
}

}  // namespace zt::testdevice
