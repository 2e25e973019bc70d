#pragma once
// The zttest device's current device, streams and events (c10::impl::DeviceGuardImplInterface
// for PrivateUse1, registered when the library loads), with CUDA's rules:
//
//   - the current device is per thread, zttest:0 on a new thread; c10::DeviceGuard switches it,
//     and memory is allocated on it (allocator.h);
//   - each thread has a current stream per device, the default stream (id 0) on a new thread;
//     getStreamFromGlobalPool hands out the kStreamPoolSize pool streams of a device round-robin,
//     getNewStream a stream id never handed out before;
//   - an event takes the device of the stream it is first recorded on, and recording it later on
//     another device's stream fails, as CUDA's does; blocking a stream on an event of another
//     device is allowed, as cudaStreamWaitEvent allows it; elapsedTime needs two events recorded
//     on one device with timing enabled (EventFlag::BACKEND_DEFAULT).
//
// Kernels run synchronously; the copies a GPU runs asynchronously wait in their stream's queue
// (stream_order.h) until an event recorded after them is waited for (block, synchronize, query),
// their stream is synchronized or queried, or the device is synchronized. The arguments are
// checked: device type and index, stream ids that were handed out.

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

namespace zt::testdevice {

// Streams 1..kStreamPoolSize of each device make its pool, as CUDA's 32 low-priority streams.
constexpr c10::StreamId kStreamPoolSize = 32;

// The calling thread's current device index.
c10::DeviceIndex current_device();
// Sets it; throws c10::Error for an index that is not 0..kDeviceCount-1.
void set_current_device(c10::DeviceIndex index);
// The calling thread's current stream of zttest:`device`.
c10::Stream current_stream(c10::DeviceIndex device);
// Throws c10::Error unless 0 <= index < kDeviceCount.
void check_device_index(c10::DeviceIndex index);
// Throws c10::Error unless `stream` is a zttest stream that exists.
void check_stream(const c10::Stream& stream);

}  // namespace zt::testdevice
