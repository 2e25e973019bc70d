// What zerotorch does to storages, on the device: parameters made views of a flat buffer with
// set_data, storages released and refilled, resized, and set_ between tensors.

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "device_fixture.h"

namespace zt::testdevice {
namespace {

class Storage : public DeviceTest {};

at::TensorOptions on(c10::Device device) {
  return torch::TensorOptions().dtype(torch::kFloat).device(device);
}

TEST_F(Storage, SetDataToANarrowViewOfAFlatBufferKeepsAliasing) {
  const at::Tensor flat = torch::zeros({10}, on(dev()));  // (10,): [pad 2 | p (2, 3) | pad 2]
  at::Tensor p = torch::randn({2, 3}, on(dev())).requires_grad_(true);
  const at::Tensor values = p.detach().clone();
  const at::Tensor range = flat.narrow(0, 2, 6).view({2, 3});
  range.copy_(p.detach());
  p.set_data(range);
  EXPECT_TRUE(p.is_alias_of(flat));
  EXPECT_EQ(p.data_ptr<float>(), flat.data_ptr<float>() + 2);
  EXPECT_TRUE(p.requires_grad());
  {
    torch::NoGradGuard no_grad;
    p.mul_(2);  // an optimizer step, through the parameter
  }
  EXPECT_TRUE(torch::equal(flat.narrow(0, 2, 6).cpu(), (values * 2).flatten().cpu()));
  flat.fill_(1);  // a gather into the flat buffer, seen by the parameter
  EXPECT_TRUE(torch::equal(p.detach().cpu(), torch::ones({2, 3})));
  (p * p).sum().backward();
  EXPECT_EQ(p.grad().device(), dev());
  EXPECT_TRUE(torch::equal(p.grad().cpu(), torch::full({2, 3}, 2.0f)));
}

// Module::to(device) moves parameters with set_data from host to device tensors: allowed between
// CPU and zttest as between CPU and CUDA.
TEST_F(Storage, SetDataMovesAHostParameterToTheDevice) {
  at::Tensor p = torch::ones({3}).requires_grad_(true);
  p.set_data(torch::zeros({3}, on(dev(1))));
  EXPECT_EQ(p.device(), dev(1));
  EXPECT_TRUE(p.requires_grad());
}

TEST_F(Storage, AReleasedStorageRefillsFromItsAllocatorOnItsDevice) {
  const at::Tensor t = torch::arange(8, on(dev(1)));
  const at::Tensor v = t.narrow(0, 2, 4);
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  const int64_t held = memory_allocated(1);
  s->set_data_ptr_noswap(c10::DataPtr());
  s->set_nbytes(0);
  EXPECT_EQ(memory_allocated(1), held - 32);
  EXPECT_EQ(t.sizes(), c10::IntArrayRef({8}));  // the tensors keep their shapes
  {
    const c10::DeviceGuard guard(t.device());
    s->set_data_ptr_noswap(s->allocator()->allocate(32));
    s->set_nbytes(32);
  }
  EXPECT_EQ(memory_allocated(1), held);
  EXPECT_EQ(s->device(), dev(1));
  t.fill_(3);
  EXPECT_TRUE(torch::equal(v.cpu(), torch::full({4}, 3.0f)));
  t.add_(torch::ones({8}, on(dev(1))));
  EXPECT_TRUE(torch::equal(v.cpu(), torch::full({4}, 4.0f)));
}

// As on CUDA, an allocator allocates on the current device: a refill without the tensor's device
// made current lands on another device, which the device's memory counters show.
TEST_F(Storage, ARefillWithoutTheDeviceGuardLandsOnTheCurrentDevice) {
  const at::Tensor t = torch::zeros({8}, on(dev(1)));
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(c10::DataPtr(nullptr, t.device()));  // as zerotorch releases
  s->set_nbytes(0);
  const int64_t held0 = memory_allocated(0);
  s->set_data_ptr_noswap(s->allocator()->allocate(32));  // current device: zttest:0
  s->set_nbytes(32);
  EXPECT_EQ(s->device(), dev(0));
  EXPECT_EQ(memory_allocated(0), held0 + 32);
}

TEST_F(Storage, ResizeGrowsOnTheTensorsDevice) {
  at::Tensor t = torch::arange(4, on(dev(1)));
  const int64_t held0 = memory_allocated(0);
  const int64_t held1 = memory_allocated(1);
  t.resize_({100});  // the current device is zttest:0
  EXPECT_EQ(t.storage().device(), dev(1));
  EXPECT_EQ(memory_allocated(0), held0);
  EXPECT_EQ(memory_allocated(1), held1 + 400 - 16);
  EXPECT_TRUE(torch::equal(t.narrow(0, 0, 4).cpu(), torch::arange(4, torch::kFloat)));
  // UntypedStorage.resize_ goes through the hooks.
  const c10::Storage storage = t.storage();
  at::detail::getPrivateUse1Hooks().resizePrivateUse1Bytes(storage, 8);
  EXPECT_EQ(storage.nbytes(), 8u);
  EXPECT_EQ(storage.device(), dev(1));
  EXPECT_EQ(memory_allocated(1), held1 + 8 - 16);
}

TEST_F(Storage, SetSharesStoragesOfOneDeviceOnly) {
  const at::Tensor source = torch::arange(6, on(dev()));
  at::Tensor t = torch::empty({0}, on(dev()));
  t.set_(source);
  EXPECT_TRUE(t.is_alias_of(source));
  t.set_(source.storage(), 2, {2, 2}, {1, 2});
  EXPECT_TRUE(torch::equal(t.cpu(), torch::arange(6, torch::kFloat).as_strided({2, 2}, {1, 2}, 2)));
  t.set_(source.storage());
  EXPECT_EQ(t.numel(), 6);
  t.set_();
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.device(), dev());
  EXPECT_EQ(t.storage().device(), dev());
  expect_error([&] { t.set_(torch::zeros({3}, on(dev(1))).storage()); },
               "Attempted to set the storage of a tensor on device \"zttest:0\" to a storage on "
               "different device \"zttest:1\"");
  expect_error([&] { t.set_(torch::zeros({3}).storage()); },
               "Attempted to set the storage of a tensor on device");
}

}  // namespace
}  // namespace zt::testdevice
