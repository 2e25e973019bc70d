// Copies to, from and between zttest devices: bit for bit, with dtype conversion, across the two
// devices, non_blocking, into strided views; and the memory they take on each device.

#include <cmath>
#include <cstring>
#include <limits>

#include <ATen/Context.h>
#include <ATen/DeviceAccelerator.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "device_fixture.h"

namespace zt::testdevice {
namespace {

class Copy : public DeviceTest {};

// Host values of `dtype` including the awkward ones: -0, inf, NaN, denormals.
at::Tensor awkward_values(c10::ScalarType dtype) {
  if (!c10::isFloatingType(dtype)) {
    return torch::randint(-1'000'000'000, 1'000'000'000, {257}, torch::kLong).to(dtype);
  }
  at::Tensor t = torch::randn({257}) * 1e3;
  const float inf = std::numeric_limits<float>::infinity();
  t.index_put_({0}, -0.0f);
  t.index_put_({1}, inf);
  t.index_put_({2}, -inf);
  t.index_put_({3}, std::numeric_limits<float>::quiet_NaN());
  t.index_put_({4}, std::numeric_limits<float>::denorm_min());
  return t.to(dtype);
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.dtype() == b.dtype() && a.sizes() == b.sizes() && a.is_contiguous() &&
         b.is_contiguous() && std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

TEST_F(Copy, HostDeviceHostRoundTripIsBitExact) {
  for (c10::ScalarType dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf, torch::kLong}) {
    const at::Tensor host = awkward_values(dtype);
    const at::Tensor on_device = host.to(dev());
    EXPECT_EQ(on_device.device(), dev());
    EXPECT_EQ(on_device.scalar_type(), dtype);
    EXPECT_TRUE(same_bits(on_device.cpu(), host)) << dtype;
    const at::Tensor on_other = on_device.to(dev(1));
    EXPECT_EQ(on_other.device(), dev(1));
    EXPECT_TRUE(same_bits(on_other.cpu(), host)) << dtype;
  }
}

TEST_F(Copy, ConvertingCopiesMatchTheHostsConversion) {
  const at::Tensor host = awkward_values(torch::kFloat);
  for (c10::ScalarType to : {torch::kBFloat16, torch::kHalf, torch::kDouble, torch::kInt}) {
    const at::Tensor expected = host.to(to);
    // host -> device, device -> device, device -> host, each converting.
    EXPECT_TRUE(same_bits(host.to(dev(), to).cpu(), expected)) << to;
    EXPECT_TRUE(same_bits(host.to(dev()).to(to).cpu(), expected)) << to;
    EXPECT_TRUE(same_bits(host.to(dev(1)).to(dev(0), to).cpu(), expected)) << to;
    at::Tensor into_host = torch::empty({257}, to);
    into_host.copy_(host.to(dev()));
    EXPECT_TRUE(same_bits(into_host, expected)) << to;
  }
}

TEST_F(Copy, NonBlockingCopiesLandOnceTheirStreamIsSynchronized) {
  const at::Tensor host = torch::randn({1000});
  const at::Tensor pinned = host.pin_memory();
  const at::Tensor a = host.to(dev(), /*non_blocking=*/true);  // pageable: done on return
  const at::Tensor b = pinned.to(dev(1), /*non_blocking=*/true);
  at::Tensor back = torch::empty({1000}).pin_memory();
  back.copy_(b, /*non_blocking=*/true);  // queued behind b's copy on zttest:1's stream
  EXPECT_TRUE(same_bits(a.cpu(), host));
  EXPECT_TRUE(back.isnan().all().item<bool>());
  at::accelerator::synchronizeDevice(1);
  EXPECT_TRUE(same_bits(back, host));
}

TEST_F(Copy, StridedSourcesAndDestinations) {
  const at::Tensor host = torch::arange(24, torch::kFloat).view({4, 6});
  const at::Tensor a = host.to(dev());
  EXPECT_TRUE(torch::equal(a.t().cpu(), host.t()));
  EXPECT_TRUE(torch::equal(a.t().contiguous().cpu(), host.t().contiguous()));
  at::Tensor b = torch::zeros({4, 6}, dev(1));
  b.narrow(1, 2, 3).copy_(host.narrow(1, 0, 3));  // host -> strided device view
  b.select(0, 3).copy_(a.select(0, 0));           // device 0 -> device 1, strided
  at::Tensor expected = torch::zeros({4, 6});
  expected.narrow(1, 2, 3).copy_(host.narrow(1, 0, 3));
  expected.select(0, 3).copy_(host.select(0, 0));
  EXPECT_TRUE(torch::equal(b.cpu(), expected));
  // Broadcasting source.
  b.copy_(torch::arange(6, torch::kFloat));
  EXPECT_TRUE(torch::equal(b.cpu(), torch::arange(6, torch::kFloat).expand({4, 6})));
}

TEST_F(Copy, PartialOverlapBetweenDeviceTensorsIsRefused) {
  at::Tensor a = torch::arange(10, torch::TensorOptions().dtype(torch::kFloat).device(dev()));
  expect_error([&] { a.narrow(0, 0, 6).copy_(a.narrow(0, 2, 6)); }, "unsupported operation");
}

TEST_F(Copy, ScalarsComeBack) {
  EXPECT_EQ(torch::tensor(3.5).to(dev(1)).item<double>(), 3.5);
  EXPECT_EQ(torch::full({2, 2}, 7, torch::TensorOptions().dtype(torch::kLong).device(dev()))
                .sum()
                .item<int64_t>(),
            28);
}

TEST_F(Copy, MemoryIsCountedOnTheDeviceItIsOn) {
  const int64_t before0 = memory_allocated(0);
  const int64_t before1 = memory_allocated(1);
  reset_peak_memory_allocated(1);
  {
    const at::Tensor a = torch::empty({1000}, dev(1));  // 4000 B on zttest:1
    EXPECT_EQ(memory_allocated(1), before1 + 4000);
    EXPECT_EQ(memory_allocated(0), before0);
    EXPECT_EQ(at::globalContext().getDeviceFromPtr(a.data_ptr(), kDeviceType), dev(1));
    const at::Tensor b = a.to(dev(0));
    EXPECT_EQ(memory_allocated(0), before0 + 4000);
  }
  EXPECT_EQ(memory_allocated(0), before0);
  EXPECT_EQ(memory_allocated(1), before1);
  EXPECT_EQ(max_memory_allocated(1), before1 + 4000);
  expect_error([] { (void)memory_allocated(2); }, "invalid device index 2");
}

TEST_F(Copy, NewMemoryIsNotZero) {
  // Fresh host pages are zero; device memory is garbage until written, and so is this device's.
  const at::Tensor a = torch::empty({64}, dev());
  EXPECT_TRUE(a.cpu().isnan().all().item<bool>());
}

}  // namespace
}  // namespace zt::testdevice
