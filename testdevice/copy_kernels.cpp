// zttest's copies and in-place fills, run by the CPU kernels on host aliases of the device memory
// (host_alias.h) rather than through the fallback's round trip:
//
//   _copy_from(src, dst)      what Tensor::copy_ calls when either side is a zttest tensor (so
//                             also .to(), .cpu(), the fallback's transfers): host -> device,
//                             device -> host, device -> device (either device), with dtype
//                             conversion, broadcasting and strides as CPU copy_ does them.
//                             Between two zttest tensors it refuses a partial overlap, as CUDA's
//                             copy_ does. The copies a GPU runs asynchronously to the host (to
//                             or from pinned host memory, non_blocking) are queued on the
//                             current stream instead (stream_order.h); every other copy first
//                             completes that stream's queue.
//   _copy_from_and_resize     the fallback's write-back of mutated arguments.
//   _local_scalar_dense       item().
//   fill_.Scalar, zero_       at::zeros, at::ones, at::full, zero_grad.
// Each of these runs after the copies queued on its stream.

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "testdevice/device_guard.h"
#include "testdevice/host_alias.h"
#include "testdevice/pinned_allocator.h"
#include "testdevice/stream_order.h"
#include "testdevice/test_device.h"

namespace zt::testdevice {
namespace {

bool on_device(const at::Tensor& t) {
  return t.device().type() == kDeviceType;
}

// Runs the copies queued on the current stream of t's device (a zttest tensor).
void after_queued(const at::Tensor& t) {
  complete(current_stream(t.device().index()));
}

// Whether the copy is queued: between the host and the device with non_blocking, from or into
// page-locked memory, which a GPU copies asynchronously to the host (from pageable memory CUDA
// copies synchronously). A copy within a device is asynchronous on a GPU too, but ordered on its
// stream like the kernels around it; queuing it would keep its source allocated past the point
// where a caching allocator reuses it, and the device's memory counts must stay a GPU's.
bool queued(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  if (on_device(src) == on_device(dst)) return false;
  const at::Tensor& host = on_device(src) ? dst : src;
  return non_blocking && is_pinned_pointer(host.const_data_ptr());
}

at::Tensor copy_from_kernel(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(src.defined() && dst.defined(), "zttest: copy of an undefined tensor");
  for (const at::Tensor* t : {&src, &dst}) {
    TORCH_CHECK(on_device(*t) || t->device().is_cpu(), "zttest: copies between ", src.device(),
                " and ", dst.device(), " are not supported");
  }
  if (on_device(src) && on_device(dst)) {
    at::assert_no_internal_overlap(dst);
    at::assert_no_partial_overlap(dst, src);
  }
  if (dst.numel() == 0) {
    return dst;
  }
  at::Tensor host_dst = on_device(dst) ? writable_host_alias(dst) : dst;
  const at::Tensor host_src = on_device(src) ? host_alias(src) : src;
  const at::Tensor& device_side = on_device(dst) ? dst : src;
  if (queued(src, dst, non_blocking) &&
      at::get_overlap_status(host_dst, host_src) == at::MemOverlapStatus::No) {
    enqueue_copy(current_stream(device_side.device().index()), host_dst, host_src, dst, src);
    return dst;
  }
  for (const at::Tensor* t : {&src, &dst}) {
    if (on_device(*t)) after_queued(*t);
  }
  host_dst.copy_(host_src);
  return dst;
}

at::Tensor copy_from_and_resize_kernel(const at::Tensor& src, const at::Tensor& dst) {
  if (dst.sizes() != src.sizes()) {
    dst.resize_(src.sizes());
  }
  return copy_from_kernel(src, dst, /*non_blocking=*/false);
}

at::Scalar local_scalar_dense_kernel(const at::Tensor& self) {
  after_queued(self);
  return at::_local_scalar_dense(host_alias(self));
}

at::Tensor& fill_scalar_kernel(at::Tensor& self, const at::Scalar& value) {
  if (self.numel() > 0) {
    after_queued(self);
    writable_host_alias(self).fill_(value);
  }
  return self;
}

at::Tensor& zero_kernel(at::Tensor& self) {
  if (self.numel() > 0) {
    after_queued(self);
    writable_host_alias(self).zero_();
  }
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", TORCH_FN(copy_from_kernel));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize_kernel));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense_kernel));
  m.impl("fill_.Scalar", TORCH_FN(fill_scalar_kernel));
  m.impl("zero_", TORCH_FN(zero_kernel));
}

}  // namespace zt::testdevice
