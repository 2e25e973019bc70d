// The plugin's entry point: fills the zt::cuda::Kernels table from the kernels compiled into
// libzt_cuda.so. Compiled only when ZT_WITH_CUDA is on.
#include <cuda_runtime.h>

#include "core/cuda_plugin.h"
#include "core/cuda_plugin_device.h"

namespace zt::cuda_kernels {
cudaError_t check_and_unscale(void* x, int64_t n, int32_t kind, float inv_scale, int32_t* found_inf,
                              cudaStream_t stream);
}

namespace {

int32_t check_and_unscale(void* x, int64_t n, zt::cuda::ScalarKind kind, float inv_scale,
                          int32_t* found_inf, void* stream) {
  const zt::cuda::LaunchOn on(x, stream);  // x's device, not necessarily the current one
  return static_cast<int32_t>(zt::cuda_kernels::check_and_unscale(
      x, n, static_cast<int32_t>(kind), inv_scale, found_inf, on.stream()));
}

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

const zt::cuda::Kernels kTable = {zt::cuda::kKernelsAbiVersion, &check_and_unscale, &error_string,
                                  &device_count};

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
