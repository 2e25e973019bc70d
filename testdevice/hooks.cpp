// zttest's PrivateUse1 hooks (at::PrivateUse1HooksInterface), registered when the library loads:
// what LibTorch asks an accelerator outside dispatch. The device count and current device (as the
// guard, device_guard.h), the default generators (generator.h), pinned host memory
// (pinned_allocator.h), the device of a pointer (allocator.h) and storage resizing.

#include <algorithm>
#include <cstring>

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include "testdevice/allocator.h"
#include "testdevice/device_guard.h"
#include "testdevice/generator.h"
#include "testdevice/pinned_allocator.h"
#include "testdevice/test_device.h"

namespace zt::testdevice {
namespace {

class Hooks final : public at::PrivateUse1HooksInterface {
 public:
  void init() const override {}
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  // Nothing to initialize: every device is ready once the library is loaded.
  bool hasPrimaryContext(c10::DeviceIndex device) const override {
    check_device_index(device);
    return true;
  }
  c10::DeviceIndex deviceCount() const override { return kDeviceCount; }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_current_device(device); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    const c10::DeviceIndex previous = current_device();
    set_current_device(device);
    return previous;
  }
  // As CUDA's: an index that is not a device leaves the current device alone.
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    if (device < 0 || device >= kDeviceCount) {
      return current_device();
    }
    return exchangeDevice(device);
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return new_generator(device);
  }

  at::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
  bool isPinnedPtr(const void* data) const override { return is_pinned_pointer(data); }

  // CUDA's answer for host memory is an error too (at::cuda::getDeviceFromPtr).
  at::Device getDeviceFromPtr(void* data) const override {
    const std::optional<c10::DeviceIndex> device = device_of_pointer(data);
    TORCH_CHECK(device.has_value(),
                "The specified pointer resides on host memory and is not zttest device memory.");
    return test_device(*device);
  }

  // Storage resizing (UntypedStorage.resize_): new memory on the storage's device, the old
  // contents copied up to the smaller size, as resize_bytes_cuda does.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
    c10::OptionalDeviceGuard guard;
    if (storage.device().type() == kDeviceType) {
      guard.reset_device(storage.device());  // a released storage (no bytes) has no device left
    }
    c10::DataPtr data = storage.allocator()->allocate(nbytes);
    const size_t kept = std::min(nbytes, storage.nbytes());
    if (kept > 0) {
      std::memcpy(data.get(), storage.data(), kept);
    }
    storage.set_data_ptr_noswap(std::move(data));
    storage.set_nbytes(nbytes);
  }
};

[[maybe_unused]] const bool hooks_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new Hooks());  // leaked: LibTorch keeps the pointer
  return true;
}();

}  // namespace
}  // namespace zt::testdevice
