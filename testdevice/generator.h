#pragma once
// zttest's random number generators. A DeviceGenerator belongs to a zttest device (device()
// is zttest:i, its dispatch key PrivateUse1), as a CUDA generator belongs to its GPU, so the
// fallback (fallback.cpp) can refuse a CPU generator for a device op and a device generator for a
// CPU op, as CUDA does. Its numbers come from a CPU generator inside (host_generator()), which
// the fallback hands to the CPU kernels in its place: a random op on the device draws the numbers
// the CPU op draws from a CPU generator of the same seed and state (CUDA's Philox draws others).
//
// Each device has a default generator, seeded with c10::default_rng_seed_val like CUDA's (and the
// CPU's), reseeded by at::manual_seed (which seeds the accelerator's generators: this device once
// loaded) and used when a random op on the device is given none.

#include <cstdint>

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace zt::testdevice {

class DeviceGenerator final : public c10::GeneratorImpl {
 public:
  explicit DeviceGenerator(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val);

  // The CPU generator that draws this generator's numbers.
  const at::Generator& host_generator() const { return host_; }

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

 private:
  DeviceGenerator* clone_impl() const override;

  at::Generator host_;
};

// The default generator of a device (index -1: the current device).
const at::Generator& default_generator(c10::DeviceIndex device);
// A new generator of a device (index -1: the current device), seeded with the default seed.
at::Generator new_generator(c10::DeviceIndex device);

}  // namespace zt::testdevice
