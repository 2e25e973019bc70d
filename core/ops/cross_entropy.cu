// The kernel of the fused token cross-entropy (core/ops/cross_entropy.h), compiled into the CUDA
// plugin. One block per row (a grid-stride loop over rows): the threads stride over the row once
// for its running maximum and sum of exponentials (merged across the block in fp32), then, for
// the gradient, once more to write softmax - one_hot scaled. The logits are read in their own
// type and never widened in memory, so a (tokens x vocab) fp32 copy, its log-softmax and the
// gradient's fp32 intermediates (what LibTorch's eager path writes) never exist.
#include <cmath>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "core/ops/cross_entropy_launch.h"

namespace zt::ops::cuda_kernels {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float load(const float* p, int64_t i) {
  return p[i];
}
__device__ __forceinline__ float load(const __half* p, int64_t i) {
  return __half2float(p[i]);
}
__device__ __forceinline__ float load(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ void store(float* p, int64_t i, float v) {
  p[i] = v;
}
__device__ __forceinline__ void store(__half* p, int64_t i, float v) {
  p[i] = __float2half_rn(v);
}
__device__ __forceinline__ void store(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}

// A running maximum m and sum s of exp(x - m) over some of a row's values. A NaN value makes s
// NaN (and the row's loss NaN, as LibTorch's); -inf values add nothing.
struct MaxSum {
  float m;
  float s;
};

__device__ __forceinline__ void add(MaxSum& a, float v) {
  if (v > a.m) {
    a.s = a.s * expf(a.m - v) + 1.f;  // the first finite value: 0 * exp(-inf) + 1
    a.m = v;
  } else if (!(v == -INFINITY)) {
    a.s += expf(v - a.m);
  }
}

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, a.s + b.s};  // nothing above -inf on either side
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ __forceinline__ MaxSum warp_merge(MaxSum a) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    MaxSum b{__shfl_xor_sync(0xffffffffu, a.m, offset), __shfl_xor_sync(0xffffffffu, a.s, offset)};
    a = merge(a, b);
  }
  return a;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) cross_entropy_kernel(const CrossEntropyLaunch L) {
  __shared__ MaxSum partial[kWarps];
  __shared__ float row_lse;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t row = blockIdx.x; row < L.rows; row += gridDim.x) {
    const T* x = static_cast<const T*>(L.logits) + row * L.row_stride;
    T* g = L.grad != nullptr ? static_cast<T*>(L.grad) + row * L.vocab : nullptr;
    const int64_t label = L.labels[row];
    if (label == L.ignore_index) {  // the same branch for the whole block
      if (threadIdx.x == 0) {
        if (L.loss != nullptr) L.loss[row] = 0.f;
        if (L.lse_out != nullptr) L.lse_out[row] = 0.f;
      }
      if (g != nullptr) {
        for (int64_t j = threadIdx.x; j < L.vocab; j += kThreads) store(g, j, 0.f);
      }
      continue;
    }
    const bool valid = label >= 0 && label < L.vocab;
    float lse;
    if (L.lse_in != nullptr && L.loss == nullptr) {
      lse = L.lse_in[row];
    } else {
      MaxSum acc{-INFINITY, 0.f};
      for (int64_t j = threadIdx.x; j < L.vocab; j += kThreads) add(acc, load(x, j));
      acc = warp_merge(acc);
      if (lane == 0) partial[warp] = acc;
      __syncthreads();
      if (warp == 0) {
        acc = lane < kWarps ? partial[lane] : MaxSum{-INFINITY, 0.f};
        acc = warp_merge(acc);
        if (lane == 0) row_lse = acc.m + logf(acc.s);
      }
      __syncthreads();
      lse = row_lse;
      // Every thread has read row_lse and partial before the next row rewrites them.
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      if (L.loss != nullptr) L.loss[row] = valid ? lse - load(x, label) : NAN;
      if (L.lse_out != nullptr) L.lse_out[row] = lse;
    }
    if (g != nullptr) {
      const float scale = valid ? L.grad_scale[row] : NAN;
      for (int64_t j = threadIdx.x; j < L.vocab; j += kThreads) {
        const float p = expf(load(x, j) - lse);
        store(g, j, (j == label ? p - 1.f : p) * scale);
      }
    }
  }
}

}  // namespace

cudaError_t cross_entropy(const CrossEntropyLaunch& launch, cudaStream_t stream) {
  if (launch.rows <= 0 || launch.vocab <= 0) return cudaSuccess;
  // One block per row up to a bound; beyond it the blocks loop over rows.
  const unsigned blocks = static_cast<unsigned>(launch.rows < (1 << 20) ? launch.rows : (1 << 20));
  switch (static_cast<LogitsType>(launch.dtype)) {
    case LogitsType::kFloat:
      cross_entropy_kernel<float><<<blocks, kThreads, 0, stream>>>(launch);
      break;
    case LogitsType::kHalf:
      cross_entropy_kernel<__half><<<blocks, kThreads, 0, stream>>>(launch);
      break;
    case LogitsType::kBFloat16:
      cross_entropy_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(launch);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace zt::ops::cuda_kernels
