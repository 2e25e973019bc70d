#include "core/zero/host_offload.h"

#include <ATen/ATen.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "base/error.h"
#include "core/zero/pinned_host.h"

namespace zt {
namespace {

c10::Stream current_stream(c10::Device device) {
  return c10::impl::VirtualGuardImpl(device.type()).getStream(device);
}

at::Tensor pinned(int64_t numel, at::ScalarType dtype, c10::DeviceType accelerator) {
  return zero::pinned_host_empty(numel, dtype, accelerator);
}

}  // namespace

HostOffload::HostOffload(c10::Device device, size_t slots)
    : device_(device),
      side_(c10::impl::VirtualGuardImpl(device.type()).getStreamFromGlobalPool(device)),
      params_done_(device.type()) {
  ZT_CHECK(!device.is_cpu(), "HostOffload is for parameters on a GPU or another accelerator, got ",
           device);
  for (size_t i = 0; i < slots; ++i) slots_.emplace_back(device_.type());
}

HostOffload::Slot& HostOffload::slot(size_t i) {
  ZT_INTERNAL_ASSERT(i < slots_.size(), "HostOffload: slot ", i, " of ", slots_.size());
  return slots_[i];
}

void HostOffload::start_grad_copy(size_t i, const at::Tensor& grad) {
  ZT_CHECK(grad.device() == device_ && grad.is_contiguous(), "HostOffload: gradient on ",
           grad.device(), ", expected contiguous on ", device_);
  Slot& s = slot(i);
  if (!s.grad_host.defined() || s.grad_host.numel() != grad.numel()) {
    s.grad_host = pinned(grad.numel(), at::kFloat, device_.type());
  }
  // The side stream starts after everything queued so far on the compute stream (the
  // reductions' waits, unscaling and clipping of this gradient).
  c10::Event ready(device_.type());
  ready.record(current_stream(device_));
  ready.block(side_);
  // The caller may drop grad (a converted copy) before the side stream read it: keep its
  // memory from being handed out again until then.
  c10::impl::VirtualGuardImpl(device_.type())
      .recordDataPtrOnStream(grad.storage().data_ptr(), side_);
  c10::StreamGuard guard(side_);
  s.grad_host.copy_(grad, /*non_blocking=*/true);
  s.grad_ready.record(side_);
}

at::Tensor HostOffload::wait_grad(size_t i) {
  Slot& s = slot(i);
  ZT_INTERNAL_ASSERT(s.grad_host.defined(), "HostOffload: wait_grad before start_grad_copy");
  s.grad_ready.synchronize();
  return s.grad_host;
}

void HostOffload::order_after_grad_copies() {
  c10::Event done(device_.type());
  done.record(side_);
  done.block(current_stream(device_));
}

at::Tensor HostOffload::param_staging(size_t i, int64_t numel, at::ScalarType dtype) {
  Slot& s = slot(i);
  if (!s.param_host.defined() || s.param_host.numel() != numel ||
      s.param_host.scalar_type() != dtype) {
    s.param_host = pinned(numel, dtype, device_.type());
  }
  return s.param_host;
}

void HostOffload::start_param_copy(size_t i, at::Tensor& target) {
  Slot& s = slot(i);
  ZT_CHECK(s.param_host.defined() && target.device() == device_ &&
               target.numel() == s.param_host.numel() && target.is_contiguous() &&
               target.scalar_type() == s.param_host.scalar_type(),
           "HostOffload: parameter copy target must be contiguous on ", device_, " with ",
           s.param_host.defined() ? s.param_host.numel() : 0, " elements of the staging dtype");
  // The compute stream may still read target (the previous forward/backward): wait for it.
  c10::Event ready(device_.type());
  ready.record(current_stream(device_));
  ready.block(side_);
  c10::impl::VirtualGuardImpl(device_.type())
      .recordDataPtrOnStream(target.storage().data_ptr(), side_);
  c10::StreamGuard guard(side_);
  target.copy_(s.param_host, /*non_blocking=*/true);
  params_pending_ = true;
}

void HostOffload::finish() {
  if (!params_pending_) return;
  params_done_.record(side_);
  params_done_.block(current_stream(device_));
  params_pending_ = false;
}

}  // namespace zt
