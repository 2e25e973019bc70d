// The plugin's entry point, zt_cuda_kernels(): the zt::cuda::Kernels table (CUDA error names, the
// device count), and the entry points other areas look up by name: host-memory registration
// (core/zero/pinned_host.cpp), the device's name and a synchronize (core/profile/).
// Compiled into libzt_cuda.so only, when ZT_WITH_CUDA is on; base/cuda_plugin.cpp loads it.
#include <cstring>

#include <cuda_runtime.h>

#include "base/cuda_plugin.h"

namespace {

const char* error_string(int32_t e) {
  return cudaGetErrorString(static_cast<cudaError_t>(e));
}

// 0 without a GPU or driver; any other CUDA failure is the negated cudaError_t (error_string
// names it), so callers can report it rather than take it for "no GPU".
int32_t device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess) return n;
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) return 0;
  return -static_cast<int32_t>(e);
}

const zt::cuda::Kernels kTable = {zt::cuda::kKernelsAbiVersion, &error_string, &device_count};

}  // namespace

extern "C" __attribute__((visibility("default"))) const zt::cuda::Kernels* zt_cuda_kernels() {
  return &kTable;
}

// Page-locks host memory allocated by the caller (core/zero/pinned_host.cpp), exactly the bytes
// given, outside PyTorch's caching pinned allocator.
extern "C" __attribute__((visibility("default"))) int32_t zt_cuda_host_register(void* ptr,
                                                                                size_t bytes) {
  return static_cast<int32_t>(cudaHostRegister(ptr, bytes, cudaHostRegisterDefault));
}

extern "C" __attribute__((visibility("default"))) int32_t zt_cuda_host_unregister(void* ptr) {
  return static_cast<int32_t>(cudaHostUnregister(ptr));
}

// The device's name as CUDA reports it ("NVIDIA H100 80GB HBM3"), for the FLOPs profiler's
// table of peak rates (core/profile/device_peak.cpp). 0 on success, else the cudaError_t.
extern "C" __attribute__((visibility("default"))) int32_t zt_cuda_device_name(int32_t device,
                                                                              char* out,
                                                                              size_t size) {
  cudaDeviceProp prop{};
  const cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) return static_cast<int32_t>(e);
  std::strncpy(out, prop.name, size > 0 ? size - 1 : 0);
  return 0;
}

// Waits for the current device's work: the FLOPs profiler times a module's forward by the
// device's clock at its profile step (core/profile/flop_counter.h).
extern "C" __attribute__((visibility("default"))) void zt_cuda_synchronize() {
  cudaDeviceSynchronize();
}
