// The device's random numbers: its own generators, seeded like CUDA's, reseeded by
// at::manual_seed, and refused where CUDA refuses a generator of another device.

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "device_fixture.h"

namespace zt::testdevice {
namespace {

class Generators : public DeviceTest {};

at::Tensor randn_on(c10::Device device, std::optional<at::Generator> gen = std::nullopt) {
  return at::randn({64}, gen, torch::TensorOptions().device(device));
}

TEST_F(Generators, RandnOnTheDeviceIsReproducibleAfterManualSeed) {
  torch::manual_seed(7);
  const at::Tensor a = randn_on(dev());
  const at::Tensor b = randn_on(dev());
  torch::manual_seed(7);
  EXPECT_TRUE(torch::equal(randn_on(dev()), a));
  EXPECT_TRUE(torch::equal(randn_on(dev()), b));
  EXPECT_FALSE(torch::equal(a, b));
  EXPECT_EQ(a.device(), dev());
}

TEST_F(Generators, EachDeviceDrawsFromItsOwnGenerator) {
  torch::manual_seed(7);
  const at::Tensor first0 = randn_on(dev(0));
  torch::manual_seed(7);
  (void)randn_on(dev(1));  // does not advance zttest:0's generator
  (void)at::randn({64});   // nor does the host's
  EXPECT_TRUE(torch::equal(randn_on(dev(0)), first0));
  const at::Generator& gen1 = at::globalContext().defaultGenerator(dev(1));
  EXPECT_EQ(gen1.device(), dev(1));
  // The numbers are the host's for the same seed (CUDA's Philox gives others).
  torch::manual_seed(7);
  EXPECT_TRUE(torch::equal(randn_on(dev(0)).cpu(), at::randn({64})));
}

TEST_F(Generators, NewGeneratorsStartFromCudasDefaultSeed) {
  at::Generator gen =
      at::globalContext().getAcceleratorHooksInterface(kDeviceType).getNewGenerator(1);
  EXPECT_EQ(gen.current_seed(), c10::default_rng_seed_val);
  EXPECT_EQ(gen.device(), dev(1));
  const at::Tensor a = randn_on(dev(1), gen);
  gen.set_current_seed(c10::default_rng_seed_val);
  EXPECT_TRUE(torch::equal(randn_on(dev(1), gen), a));
  const at::Generator copy = gen.clone();
  EXPECT_TRUE(torch::equal(randn_on(dev(1), copy), randn_on(dev(1), gen)));
}

TEST_F(Generators, DropoutOnTheDeviceUsesTheDevicesGenerator) {
  const at::Tensor ones = torch::ones({256}, dev());
  torch::manual_seed(3);
  const at::Tensor a = torch::dropout(ones, 0.5, /*train=*/true);
  torch::manual_seed(3);
  EXPECT_TRUE(torch::equal(torch::dropout(ones, 0.5, /*train=*/true), a));
}

TEST_F(Generators, AGeneratorOfAnotherDeviceIsRefused) {
  expect_error([&] { (void)randn_on(dev(), at::detail::getDefaultCPUGenerator()); },
               "Expected a 'zttest' device type for generator but found 'cpu'");
  expect_error([&] { (void)randn_on(torch::kCPU, at::globalContext().defaultGenerator(dev())); },
               "Expected a 'cpu' device type for generator but found 'zttest'");
}

}  // namespace
}  // namespace zt::testdevice
