#pragma once
// HostOffload: the optimizer-offload data path when the model lives on a GPU (ZeRO-Offload).
// Per flat buffer ("slot"), pinned host memory for the owned gradient slice (fp32) and for the
// updated 16-bit parameters, and one side stream of the GPU for both copy directions:
//
//   compute stream  ..backward: g1 reduced ┐ .. g0 reduced ┐ ..|end          ┌ wait all ─> next fwd
//   side stream                            └ D2H g1        └ D2H g0 .. H2D p0, H2D p1 ┘
//   host (CpuAdam)                                             |wait g0 → step 0 → wait g1 → step 1
//
// start_grad_copy() enqueues a slot's device-to-host copy after what the compute stream has
// queued so far: the sharded step starts each as the slot's gradient becomes final
// (ShardedStep::gradient_reduced, during backward, where nothing changes it later; else all at
// the step's start). The host then steps slot after slot as soon as its gradient landed
// (wait_grad), and each slot's updated parameters go back with start_param_copy() while the next
// slot steps, so the copies overlap backward and CPU Adam. Where nothing in the step waits for
// every bucket (ShardedStep::steps_at_reduction), a worker thread steps each slot as its gradient
// lands, during backward, and its parameters' copy follows at once.
// finish() makes LibTorch's current stream wait for the parameter copies: later kernels see the
// new weights, the host never blocks on them. Pinned buffers are reused across steps; a slot's
// host buffers are rewritten only after its previous copies completed (wait_grad waits on an
// event recorded after them on the same stream).
//
// Only device-generic c10 calls (c10::Stream, c10::Event, c10::StreamGuard): zt_core keeps
// linking LibTorch's CPU part only.

#include <cstddef>
#include <deque>

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

namespace zt {

class HostOffload {
 public:
  // slots: how many (the sharded step's buckets), fixed, so that the sharded step's worker thread
  // (core/zero/serial_worker.h) and backward can use different slots at once.
  HostOffload(c10::Device device, size_t slots);

  // Enqueues grad (on device, contiguous) -> pinned fp32 host slot, after the work already on
  // the current stream. grad must stay allocated until wait_grad(slot).
  void start_grad_copy(size_t slot, const at::Tensor& grad);
  // Blocks the host until slot's gradient landed; returns it (pinned fp32, CPU).
  at::Tensor wait_grad(size_t slot);
  // LibTorch's current stream waits for every gradient copy started so far: what it writes next
  // into a gradient (the next backward) comes after the copies read it. For a step that started
  // copies and then waited for none (an overflow skipped it).
  void order_after_grad_copies();
  // Pinned host buffer of dtype and numel for slot's updated 16-bit parameters.
  at::Tensor param_staging(size_t slot, int64_t numel, at::ScalarType dtype);
  // Enqueues param_staging(slot) -> target (on device) on the side stream, after what the calling
  // thread's current stream has queued. From another thread (the sharded step's worker) that
  // orders nothing against the compute stream; the copy then comes after the compute stream's
  // point at the slot's start_grad_copy through the side stream's own order, which is all a slot
  // stepped at its reduction needs (backward reads its parameters no more).
  void start_param_copy(size_t slot, at::Tensor& target);
  // LibTorch's current stream waits for every parameter copy started so far.
  void finish();

 private:
  struct Slot {
    explicit Slot(c10::DeviceType accelerator) : grad_ready(accelerator) {}
    at::Tensor grad_host;   // pinned fp32
    at::Tensor param_host;  // pinned fp16/bf16
    c10::Event grad_ready;  // of the model's device type (an event records on its own kind)
  };
  Slot& slot(size_t i);

  c10::Device device_;
  c10::Stream side_;
  c10::Event params_done_;
  bool params_pending_ = false;
  std::deque<Slot> slots_;  // a deque: Slot (its event) cannot be moved
};

}  // namespace zt
