// CUDA side of zt::check_and_unscale_ (core/precision/overflow_check.h): one grid-stride pass that
// flags inf/NaN and multiplies by inv_scale. Compiled into the plugin for sm_90 SASS plus PTX.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace zt::cuda_kernels {
namespace {

__device__ inline float to_float(float v) {
  return v;
}
__device__ inline float to_float(__half v) {
  return __half2float(v);
}
__device__ inline float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T>
__device__ inline T from_float(float v);
template <>
__device__ inline float from_float<float>(float v) {
  return v;
}
template <>
__device__ inline __half from_float<__half>(float v) {
  return __float2half(v);
}
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}

template <typename T>
__global__ void check_and_unscale_kernel(T* x, int64_t n, float inv_scale, int32_t* found_inf) {
  bool bad = false;
  const bool scale = inv_scale != 1.0f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = to_float(x[i]);
    bad |= !isfinite(v);
    if (scale) x[i] = from_float<T>(v * inv_scale);
  }
  // One write per warp that saw a bad value; the flag only ever goes 0 -> 1.
  if (__any_sync(0xffffffffu, bad) && (threadIdx.x % 32) == 0) *found_inf = 1;
}

template <typename T>
cudaError_t launch(T* x, int64_t n, float inv_scale, int32_t* found_inf, cudaStream_t stream) {
  constexpr int kThreads = 256;
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > 4096) blocks = 4096;
  check_and_unscale_kernel<T>
      <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, n, inv_scale, found_inf);
  return cudaGetLastError();
}

}  // namespace

// kind: 0 fp32, 1 fp16, 2 bf16 (zt::cuda::ScalarKind).
cudaError_t check_and_unscale(void* x, int64_t n, int32_t kind, float inv_scale, int32_t* found_inf,
                              cudaStream_t stream) {
  switch (kind) {
    case 0: return launch(static_cast<float*>(x), n, inv_scale, found_inf, stream);
    case 1: return launch(static_cast<__half*>(x), n, inv_scale, found_inf, stream);
    case 2: return launch(static_cast<__nv_bfloat16*>(x), n, inv_scale, found_inf, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace zt::cuda_kernels
