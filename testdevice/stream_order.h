#pragma once
// Asynchronous copies on the zttest device: the part of a GPU's stream semantics that the device
// can keep while its kernels run synchronously, so that a missing stream wait or host
// synchronization fails on every CI machine instead of only on a GPU.
//
// A copy that a GPU runs asynchronously is not done when copy_ returns here either. It is queued
// on the current stream of its zttest device, its destination is overwritten with poison at once
// (NaN for floating types, all bits set otherwise), and the values land only when something
// orders that stream's work before the reader, which on a GPU would have been required too:
//
//   queued (asynchronous on a GPU)         done when (up to an event: its record point)
//   -------------------------------        -----------------------------------------------
//   host -> device, non_blocking,          an op issued on the same stream (streams keep order)
//     from pinned host memory              Event::block on another stream (cudaStreamWaitEvent)
//   device -> host, non_blocking,          Event::synchronize / query, Stream::synchronize /
//     into pinned host memory                query, device synchronize (cudaEvent/Stream/
//                                            DeviceSynchronize)
//                                          a blocking copy or item() on that stream
//                                          the memory it touches being freed (what recordStream
//                                            and the caching allocator guarantee on a GPU)
//
// Everything else (copies from or to pageable host memory, which CUDA performs synchronously,
// blocking copies, copies within the device, every kernel) first completes its stream's queue
// and then runs at once, as an in-order stream would run it. So a kernel on the default
// stream that reads parameters a side stream is still copying in reads NaN; a host loop that
// reads a pinned gradient buffer before the copy's event was synchronized reads NaN; a host that
// rewrites a pinned source buffer before its copy ran sends the rewritten values. Each of these
// is a legal schedule of the same program on a GPU, only the least lucky one.
//
// What stays unseen: kernels and copies within the device run at once, so a side stream that
// reads what the default stream computes without waiting for it still sees the finished values,
// and so does a stream that reads another's device-to-device copy.

#include <cstdint>

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>

namespace zt::testdevice {

// Queues host_dst.copy_(host_src) on `stream` and poisons host_dst now. host_dst and host_src
// are host tensors (a zttest tensor's host alias, or a pinned host tensor); keep_dst and keep_src
// are the tensors the caller copies between, kept alive until the copy runs.
void enqueue_copy(const c10::Stream& stream, const at::Tensor& host_dst, const at::Tensor& host_src,
                  const at::Tensor& keep_dst, const at::Tensor& keep_src);

// Runs every copy queued on `stream` before position `upto` (all of them by default), in order.
void complete(const c10::Stream& stream, uint64_t upto = UINT64_MAX);
// Runs every copy queued on any stream of zttest:`device`.
void complete_device(c10::DeviceIndex device);
// The queue position of `stream` now: what an event recorded on it now waits for.
uint64_t queue_position(const c10::Stream& stream);
// Runs the copies (and everything before them on their streams) that read or write the bytes
// [ptr, ptr + nbytes): called by the allocators before they free those bytes.
void complete_touching(const void* ptr, size_t nbytes);

}  // namespace zt::testdevice
