#include "testdevice/generator.h"

#include <array>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>

#include "testdevice/device_guard.h"
#include "testdevice/test_device.h"

namespace zt::testdevice {

DeviceGenerator::DeviceGenerator(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(kDeviceType, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      host_(at::detail::createCPUGenerator(seed)) {}

// The host generator's own mutex guards its state against the CPU kernels drawing from it (they
// lock it, not ours).
void DeviceGenerator::set_current_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(host_.mutex());
  host_.set_current_seed(seed);
}

void DeviceGenerator::set_offset(uint64_t offset) {
  std::lock_guard<std::mutex> lock(host_.mutex());
  host_.set_offset(offset);
}

uint64_t DeviceGenerator::get_offset() const {
  return host_.get_offset();
}

uint64_t DeviceGenerator::current_seed() const {
  return host_.current_seed();
}

uint64_t DeviceGenerator::seed() {
  std::lock_guard<std::mutex> lock(host_.mutex());
  return host_.seed();
}

void DeviceGenerator::set_state(const c10::TensorImpl& new_state) {
  std::lock_guard<std::mutex> lock(host_.mutex());
  host_.unsafeGetGeneratorImpl()->set_state(new_state);
}

c10::intrusive_ptr<c10::TensorImpl> DeviceGenerator::get_state() const {
  return host_.unsafeGetGeneratorImpl()->get_state();
}

DeviceGenerator* DeviceGenerator::clone_impl() const {
  auto* copy = new DeviceGenerator(device_.index());
  copy->host_ = host_.clone();
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::array<std::once_flag, kDeviceCount> created;
  static auto* generators = new std::array<at::Generator, kDeviceCount>();  // leaked, like CUDA's
  const c10::DeviceIndex index = device == -1 ? current_device() : device;
  check_device_index(index);
  std::call_once(created[index],
                 [&] { (*generators)[index] = at::make_generator<DeviceGenerator>(index); });
  return (*generators)[index];
}

at::Generator new_generator(c10::DeviceIndex device) {
  const c10::DeviceIndex index = device == -1 ? current_device() : device;
  check_device_index(index);
  return at::make_generator<DeviceGenerator>(index);
}

}  // namespace zt::testdevice
