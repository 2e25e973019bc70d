// The device's current device, streams, events and pinned memory: synchronous, but checked as
// CUDA checks them (testdevice/device_guard.h).

#include <thread>

#include <ATen/Context.h>
#include <ATen/DeviceAccelerator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "device_fixture.h"

namespace zt::testdevice {
namespace {

class Streams : public DeviceTest {};

TEST_F(Streams, TheDeviceIsTheProcesssAccelerator) {
  EXPECT_EQ(at::getAccelerator(), kDeviceType);
  EXPECT_EQ(at::accelerator::deviceCount(), kDeviceCount);
  EXPECT_EQ(c10::Device("zttest:1"), dev(1));
  EXPECT_EQ(dev(1).str(), "zttest:1");
}

TEST_F(Streams, TheDeviceGuardSwitchesTheCurrentDevice) {
  const c10::impl::VirtualGuardImpl impl(kDeviceType);
  EXPECT_EQ(impl.getDevice(), dev(0));
  {
    const c10::DeviceGuard guard(dev(1));
    EXPECT_EQ(impl.getDevice(), dev(1));
    // Memory without an index goes to the current device.
    EXPECT_EQ(torch::empty({4}, torch::TensorOptions().device(kDeviceType)).device(), dev(1));
    // Each thread has its own current device, zttest:0 to begin with.
    c10::Device seen = dev(1);
    std::thread([&] { seen = impl.getDevice(); }).join();
    EXPECT_EQ(seen, dev(0));
  }
  EXPECT_EQ(impl.getDevice(), dev(0));
  expect_error([] { const c10::DeviceGuard guard(test_device(2)); }, "invalid device index 2");
}

TEST_F(Streams, RecordBlockQueryAndSynchronizeAcrossTwoStreams) {
  const c10::impl::VirtualGuardImpl impl(kDeviceType);
  const c10::Stream producer = impl.getStreamFromGlobalPool(dev(0));
  const c10::Stream consumer = impl.getNewStream(dev(0));
  EXPECT_NE(producer, consumer);
  EXPECT_EQ(impl.getStream(dev(0)), impl.getDefaultStream(dev(0)));
  at::Tensor a = torch::zeros({16}, dev());
  c10::Event ready(kDeviceType);
  {
    const c10::StreamGuard on_producer(producer);
    EXPECT_EQ(impl.getStream(dev(0)), producer);
    a.fill_(1);
    ready.record(producer);
  }
  EXPECT_EQ(impl.getStream(dev(0)), impl.getDefaultStream(dev(0)));
  ready.block(consumer);
  EXPECT_TRUE(ready.query());
  ready.synchronize();
  impl.synchronizeStream(consumer);
  EXPECT_TRUE(impl.queryStream(producer));
  {
    const c10::StreamGuard on_consumer(consumer);
    a.add_(1);
  }
  EXPECT_TRUE(torch::equal(a.cpu(), torch::full({16}, 2.0f)));
  // Another thread starts on the default streams.
  c10::Stream seen = producer;
  std::thread([&] { seen = impl.getStream(dev(0)); }).join();
  EXPECT_EQ(seen, impl.getDefaultStream(dev(0)));
}

TEST_F(Streams, EventsAreCheckedAsOnCuda) {
  const c10::impl::VirtualGuardImpl impl(kDeviceType);
  const c10::Stream on0 = impl.getNewStream(dev(0));
  const c10::Stream on1 = impl.getNewStream(dev(1));
  c10::Event event(kDeviceType);
  event.record(on0);
  expect_error([&] { event.record(on1); },
               "Event device index 0 does not match recording stream's device index 1.");
  event.block(on1);  // cudaStreamWaitEvent takes an event of another device
  // elapsedTime needs timing, which PyTorch's default events leave out (c10::Event checks it
  // before the device does).
  c10::Event start(kDeviceType, c10::EventFlag::BACKEND_DEFAULT);
  c10::Event end(kDeviceType, c10::EventFlag::BACKEND_DEFAULT);
  start.record(on0);
  end.record(on0);
  EXPECT_GE(start.elapsedTime(end), 0.0);
  c10::Event untimed(kDeviceType);
  untimed.record(on0);
  expect_error([&] { (void)start.elapsedTime(untimed); }, "enable_timing=True");
  // Streams that were never handed out, or of another device type.
  expect_error([&] { impl.exchangeStream(c10::Stream(c10::Stream::UNSAFE, dev(0), 1 << 30)); },
               "no stream with id");
  expect_error([&] { impl.exchangeStream(c10::Stream(c10::Stream::DEFAULT, test_device(2))); },
               "invalid device index 2");
  expect_error(
      [&] { torch::ones({2}, dev()).record_stream(c10::Stream(c10::Stream::DEFAULT, c10::kCPU)); },
      "expected a zttest stream");
  torch::ones({2}, dev(1)).record_stream(on1);
}

TEST_F(Streams, PinnedMemoryComesFromTheDevicesHostAllocator) {
  const at::Tensor pinned = torch::empty({16}, torch::TensorOptions().pinned_memory(true));
  EXPECT_TRUE(pinned.is_pinned());
  EXPECT_TRUE(pinned.narrow(0, 4, 4).is_pinned());
  EXPECT_FALSE(torch::empty({16}).is_pinned());
  const at::Tensor copied = torch::arange(16).pin_memory();
  EXPECT_TRUE(copied.is_pinned());
  EXPECT_TRUE(torch::equal(copied, torch::arange(16)));
  EXPECT_FALSE(torch::empty({16}, dev()).cpu().is_pinned());
  expect_error(
      [&] { (void)torch::empty({4}, torch::TensorOptions().device(dev()).pinned_memory(true)); },
      "Only dense CPU tensors can be pinned");
}

}  // namespace
}  // namespace zt::testdevice
