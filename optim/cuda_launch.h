#pragma once
// Plugin side only (libzt_cuda.so; includes LibTorch's CUDA headers), for the optimizers' CUDA
// launchers (optim/*_cuda.cpp): the device and stream of one kernel launch. A launcher gets raw
// device pointers and maybe a stream; with several GPUs per process (or a rank whose current
// device was never set), "the current device" need not be the one that owns the pointers, so the
// launch runs on the device of its first pointer and, when no stream is given, on LibTorch's
// current stream of that device.

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

namespace zt::cuda {

// The device that owns `ptr`, or the current device for a host/unknown pointer.
inline c10::DeviceIndex device_of(const void* ptr) {
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    // Not sticky, but it would stay in cudaGetLastError() and be blamed on the launch that
    // follows: clear it.
    (void)cudaGetLastError();
  } else if (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged) {
    return static_cast<c10::DeviceIndex>(attr.device);
  }
  int current = 0;
  (void)cudaGetDevice(&current);
  return static_cast<c10::DeviceIndex>(current);
}

// Makes the pointer's device current for its lifetime (restoring the previous one after).
class LaunchOn {
 public:
  LaunchOn(const void* ptr, void* stream)
      : guard_(device_of(ptr)),
        stream_(stream
                    ? static_cast<cudaStream_t>(stream)
                    : c10::cuda::getCurrentCUDAStream(guard_.current_device().index()).stream()) {}
  cudaStream_t stream() const { return stream_; }

 private:
  c10::cuda::CUDAGuard guard_;
  cudaStream_t stream_;
};

}  // namespace zt::cuda
