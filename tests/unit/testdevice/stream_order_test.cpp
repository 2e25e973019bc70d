// The copies a GPU runs asynchronously land only when their stream's work is ordered before the
// reader (testdevice/stream_order.h): a reader that skips the wait sees poison, one that waits
// sees the values, and streams keep their own order.

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "device_fixture.h"

namespace zt::testdevice {
namespace {

class StreamOrder : public DeviceTest {
 protected:
  c10::Stream side() const {
    return c10::impl::VirtualGuardImpl(kDeviceType).getStreamFromGlobalPool(dev(0));
  }
  static c10::Stream default_stream() {
    return c10::impl::VirtualGuardImpl(kDeviceType).getDefaultStream(dev(0));
  }
  static bool all_nan(const at::Tensor& t) { return t.isnan().all().item<bool>(); }
  // dst.copy_(src, non_blocking) issued on `stream`.
  static void copy_on(const c10::Stream& stream, at::Tensor& dst, const at::Tensor& src) {
    const c10::StreamGuard on(stream);
    dst.copy_(src, /*non_blocking=*/true);
  }
};

TEST_F(StreamOrder, AnUploadOnASideStreamNeedsAWaitBeforeTheDefaultStreamReadsIt) {
  const at::Tensor values = torch::randn({64}).pin_memory();
  at::Tensor params = torch::zeros({64}, dev());
  const c10::Stream copy_stream = side();
  c10::Event uploaded(kDeviceType);
  copy_on(copy_stream, params, values);
  uploaded.record(copy_stream);
  // No wait: a kernel on the default stream reads what the copy has not written yet.
  EXPECT_TRUE(all_nan(params.cpu()));
  uploaded.block(default_stream());
  EXPECT_TRUE(torch::equal(params.cpu(), values));
}

TEST_F(StreamOrder, ADownloadIsPoisonUntilItsEventIsSynchronized) {
  const at::Tensor grad = torch::randn({64}).to(dev());
  const at::Tensor zeros = torch::zeros({8}, dev());
  at::Tensor staging = torch::empty({64}).pin_memory();
  at::Tensor later = torch::empty({8}).pin_memory();
  const c10::Stream copy_stream = side();
  c10::Event landed(kDeviceType);
  copy_on(copy_stream, staging, grad);
  landed.record(copy_stream);
  // Queued after the event: waiting for the event does not wait for it. (A kernel issued on this
  // stream here, such as torch::zeros, would run the queue first.)
  copy_on(copy_stream, later, zeros);
  EXPECT_TRUE(all_nan(staging));  // the host reads before synchronizing
  landed.synchronize();
  EXPECT_TRUE(torch::equal(staging, grad.cpu()));
  EXPECT_TRUE(all_nan(later));
  c10::impl::VirtualGuardImpl(kDeviceType).synchronizeStream(copy_stream);
  EXPECT_TRUE(torch::equal(later, torch::zeros({8})));
}

TEST_F(StreamOrder, WorkOnTheSameStreamSeesTheCopy) {
  const at::Tensor values = torch::arange(32, torch::kFloat).pin_memory();
  at::Tensor a = torch::zeros({32}, dev());
  at::Tensor b = torch::zeros({32}, dev());
  {
    const c10::StreamGuard on_side(side());
    a.copy_(values, /*non_blocking=*/true);
    b.copy_(a);  // device to device: after the upload
    b.add_(1);
    EXPECT_TRUE(torch::equal(b.cpu(), values + 1));
  }
}

TEST_F(StreamOrder, AHostThatRewritesAPinnedSourceEarlySendsTheNewValues) {
  at::Tensor staging = torch::full({16}, 1.0f).pin_memory();
  at::Tensor params = torch::zeros({16}, dev());
  params.copy_(staging, /*non_blocking=*/true);  // on the default stream
  staging.fill_(2.0f);                           // before the copy ran: a race on a GPU
  EXPECT_TRUE(torch::equal(params.cpu(), torch::full({16}, 2.0f)));
}

TEST_F(StreamOrder, CopiesFromPageableMemoryAndBlockingCopiesAreDoneOnReturn) {
  const at::Tensor pageable = torch::randn({16});
  at::Tensor a = torch::zeros({16}, dev());
  at::Tensor b = torch::zeros({16}, dev());
  {
    const c10::StreamGuard on_side(side());
    a.copy_(pageable, /*non_blocking=*/true);
    b.copy_(pageable.pin_memory(), /*non_blocking=*/false);
  }
  EXPECT_TRUE(torch::equal(a.cpu(), pageable));
  EXPECT_TRUE(torch::equal(b.cpu(), pageable));
}

TEST_F(StreamOrder, ALaterCopyOnTheStreamDoesNotPoisonAnEarlierOnesSource) {
  const at::Tensor first = torch::randn({16});
  at::Tensor x = first.to(dev());
  at::Tensor y = torch::empty({16}).pin_memory();
  const at::Tensor second = torch::randn({16}).pin_memory();
  const c10::Stream copy_stream = side();
  copy_on(copy_stream, y, x);       // reads x ...
  copy_on(copy_stream, x, second);  // ... before this overwrites it, in stream order
  c10::impl::VirtualGuardImpl(kDeviceType).synchronizeStream(copy_stream);
  EXPECT_TRUE(torch::equal(y, first));
  EXPECT_TRUE(torch::equal(x.cpu(), second));
}

TEST_F(StreamOrder, QueryingAnEventOrAStreamCompletesIt) {
  const at::Tensor values = torch::randn({8}).to(dev());
  at::Tensor staging = torch::empty({8}).pin_memory();
  const c10::Stream copy_stream = side();
  c10::Event landed(kDeviceType);
  copy_on(copy_stream, staging, values);
  landed.record(copy_stream);
  EXPECT_TRUE(landed.query());
  EXPECT_TRUE(torch::equal(staging, values.cpu()));
}

TEST_F(StreamOrder, FreeingMemoryRunsTheCopiesThatUseItFirst) {
  at::Tensor staging = torch::empty({4096}).pin_memory();
  const at::Tensor values = torch::randn({4096});
  {
    at::Tensor source = values.to(dev());
    const c10::StreamGuard on_side(side());
    staging.copy_(source, /*non_blocking=*/true);
    // Released as stage 3 releases a gathered buffer: the storage drops its memory now.
    source.storage().set_data_ptr_noswap(c10::DataPtr(nullptr, dev()));
    source.storage().set_nbytes(0);
  }
  // No wait: the release itself ran the copy, before the memory went.
  EXPECT_TRUE(torch::equal(staging, values));
}

}  // namespace
}  // namespace zt::testdevice
