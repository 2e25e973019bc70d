// The rule that makes zttest a separate device: an op mixing a device tensor with a host tensor,
// or tensors of two devices, fails as it would on CUDA, with CUDA's wording; what CUDA accepts
// (0-dim host scalars, host indices in advanced indexing) is accepted.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "device_fixture.h"

namespace zt::testdevice {
namespace {

using torch::indexing::Slice;

class DeviceCheck : public DeviceTest {};

constexpr char kSameDevice[] =
    "Expected all tensors to be on the same device, but found at least two devices, ";

TEST_F(DeviceCheck, AHostTensorInADeviceOpFails) {
  const at::Tensor a = torch::ones({4, 4}, dev());
  const at::Tensor host = torch::ones({4, 4});
  expect_error([&] { (void)(a + host); }, std::string(kSameDevice) + "zttest:0 and cpu!");
  expect_error([&] { (void)(host * a); }, kSameDevice);
  expect_error([&] { (void)at::matmul(a, host); }, kSameDevice);
  expect_error([&] { (void)a.index_select(0, torch::tensor({0, 2})); }, kSameDevice);
  expect_error([&] { (void)torch::cat({a, host}); }, kSameDevice);
  expect_error([&] { (void)torch::where(host > 0, a, a); }, kSameDevice);
  // In place and out=: the written tensor counts too.
  expect_error([&] { a.clone().add_(host); }, kSameDevice);
  expect_error([&] { host.clone().mul_(a); }, kSameDevice);
  at::Tensor out = torch::empty({4, 4});
  expect_error([&] { at::add_out(out, a, a); }, kSameDevice);
}

TEST_F(DeviceCheck, TwoDevicesFail) {
  const at::Tensor a = torch::ones({3}, dev(0));
  const at::Tensor b = torch::ones({3}, dev(1));
  expect_error([&] { (void)(a + b); }, std::string(kSameDevice) + "zttest:0 and zttest:1!");
  expect_error([&] { (void)torch::dot(b, a); }, kSameDevice);
  expect_error([&] { (void)torch::stack({a, b}); }, kSameDevice);
}

TEST_F(DeviceCheck, AZeroDimHostScalarIsAccepted) {
  const at::Tensor a = torch::arange(4, torch::TensorOptions().dtype(torch::kFloat).device(dev()));
  const at::Tensor two = torch::tensor(2.0f);
  for (const at::Tensor& r : {a * two, two * a, torch::where(a > 1, a, two)}) {
    EXPECT_EQ(r.device(), dev());
  }
  EXPECT_TRUE(torch::equal((two * a).cpu(), torch::arange(4, torch::kFloat) * 2));
  at::Tensor b = a.clone();
  b.addcmul_(a, a, /*value=*/1).add_(two);
  EXPECT_TRUE(torch::equal(
      b.cpu(), torch::arange(4, torch::kFloat).pow(2) + torch::arange(4, torch::kFloat) + 2));
}

// CUDA's advanced indexing moves host index tensors to the device (device_check.h); index_select
// and embedding do not.
TEST_F(DeviceCheck, HostIndicesAreAcceptedWhereCudaAcceptsThem) {
  const at::Tensor host = torch::arange(12, torch::kFloat).view({3, 4});
  const at::Tensor a = host.to(dev());
  const at::Tensor rows = torch::tensor({2, 0});
  EXPECT_TRUE(torch::equal(a.index({rows}).cpu(), host.index({rows})));
  EXPECT_EQ(a.index({rows}).device(), dev());
  const at::Tensor mask = host > 5;
  EXPECT_TRUE(torch::equal(a.index({mask}).cpu(), host.index({mask})));
  at::Tensor b = a.clone();
  b.index_put_({rows}, torch::zeros({4}, dev()));
  at::Tensor expected = host.clone();
  expected.index_put_({rows}, torch::zeros({4}));
  EXPECT_TRUE(torch::equal(b.cpu(), expected));
  // The values must be on the device, unless a scalar.
  expect_error([&] { b.index_put_({rows}, torch::zeros({4})); }, kSameDevice);
  b.index_put_({rows, Slice()}, torch::tensor(5.0f));
  expect_error([&] { (void)torch::embedding(a, torch::tensor({0, 1})); }, kSameDevice);
  expect_error([&] { (void)a.gather(1, torch::zeros({3, 1}, torch::kLong)); }, kSameDevice);
}

TEST_F(DeviceCheck, NnFunctionalOpsCheckToo) {
  torch::nn::Linear linear(4, 2);
  linear->to(dev());
  EXPECT_EQ(linear->weight.device(), dev());
  expect_error([&] { (void)linear(torch::ones({3, 4})); }, kSameDevice);
  const at::Tensor logits = torch::zeros({3, 5}, dev());
  expect_error(
      [&] {
        (void)torch::nn::functional::cross_entropy(logits, torch::tensor({1, 2, 3}));
      },
      kSameDevice);
}

}  // namespace
}  // namespace zt::testdevice
