// The kernels of Adam8bit on a GPU shard (optim/adam8bit.h), compiled into the CUDA plugin.
//
// Quantized state: one CUDA block per quantization block. Each thread dequantizes its elements'
// m and v, applies Adam to those inside a group and parks m, v in shared memory; a block-wide max
// gives the new absmax; then every element is encoded again. fp32 state (small shards): one
// grid-stride pass. The arithmetic is adam_formula.h's unfused update, as on the CPU (its device
// build uses explicit round-to-nearest intrinsics, so nvcc cannot contract it into FMAs), so
// results match the CPU bit for bit.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "optim/adam8bit_launch.h"

namespace zt::optim::cuda_kernels {
namespace {

using zt::optim::Adam8bitGroup;
using zt::optim::Adam8bitLaunch;

constexpr int kThreads = 256;

// Index of the group holding element i, or -1 (groups sorted by begin, disjoint).
__device__ int find_group(const Adam8bitGroup* groups, int count, int64_t i) {
  int lo = 0, hi = count;  // first group with end > i
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (groups[mid].end > i) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo < count && groups[lo].begin <= i ? lo : -1;
}

__device__ void write_half(const Adam8bitLaunch& L, int64_t i, float p) {
  if (L.half_kind == 1) {
    static_cast<__half*>(L.half_out)[i] = __float2half_rn(p);
  } else if (L.half_kind == 2) {
    static_cast<__nv_bfloat16*>(L.half_out)[i] = __float2bfloat16_rn(p);
  }
}

// The number of midpoints below x: QuantCodec::encode_by_bisection.
__device__ uint8_t encode(const float* mid, float x) {
  int lo = 0;
  for (int step = 128; step > 0; step >>= 1) {
    const int probe = lo + step - 1;
    if (probe < 255 && mid[probe] < x) lo += step;
  }
  return static_cast<uint8_t>(lo);
}

__device__ float block_max(float x, float* scratch) {
  for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_down_sync(0xffffffffu, x, off));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  if (warp == 0) {
    x = lane < kThreads / 32 ? scratch[lane] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_down_sync(0xffffffffu, x, off));
    if (lane == 0) scratch[0] = x;
  }
  __syncthreads();
  const float result = scratch[0];
  __syncthreads();
  return result;
}

__global__ void adam8bit_quantized_kernel(const Adam8bitLaunch L) {
  extern __shared__ float shared[];  // m [block], v [block]
  __shared__ float book[zt::optim::kAdam8bitCodebookFloats];
  __shared__ float scratch[kThreads / 32];
  for (int k = threadIdx.x; k < zt::optim::kAdam8bitCodebookFloats; k += blockDim.x) {
    book[k] = L.codebook[k];
  }
  float* ms = shared;
  float* vs = shared + L.block;
  const float* signed_map = book;
  const float* signed_mid = book + 256;
  const float* unsigned_map = book + 512;
  const float* unsigned_mid = book + 768;
  __syncthreads();

  const int64_t b = blockIdx.x;
  const int64_t lo = b * L.block;
  const int64_t hi = lo + L.block < L.n ? lo + L.block : L.n;
  const float m_scale = L.m_absmax[b], v_scale = L.v_absmax[b];
  float mmax = 0.0f, vmax = 0.0f;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    float m = __fmul_rn(signed_map[L.m_code[i]], m_scale);
    float v = __fmul_rn(unsigned_map[L.v_code[i]], v_scale);
    const int gi = find_group(L.groups, L.num_groups, i);
    if (gi >= 0) {
      float p = L.param[i];
      zt::optim::adam_update<false>(L.groups[gi].c, p, L.grad[i], m, v);
      L.param[i] = p;
      write_half(L, i, p);
    }
    ms[i - lo] = m;
    vs[i - lo] = v;
    mmax = fmaxf(mmax, fabsf(m));
    vmax = fmaxf(vmax, v);
  }
  mmax = block_max(mmax, scratch);  // also orders every read of the old absmax before the write
  vmax = block_max(vmax, scratch);
  if (threadIdx.x == 0) {
    L.m_absmax[b] = mmax;
    L.v_absmax[b] = vmax;
  }
  const float mi = mmax > 0.0f ? __fdiv_rn(1.0f, mmax) : 0.0f;
  const float vi = vmax > 0.0f ? __fdiv_rn(1.0f, vmax) : 0.0f;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    L.m_code[i] = encode(signed_mid, __fmul_rn(ms[i - lo], mi));
    L.v_code[i] = encode(unsigned_mid, __fmul_rn(vs[i - lo], vi));
  }
}

__global__ void adam8bit_fp32_kernel(const Adam8bitLaunch L) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < L.n;
       i += stride) {
    const int gi = find_group(L.groups, L.num_groups, i);
    if (gi < 0) continue;
    float p = L.param[i], m = L.m32[i], v = L.v32[i];
    zt::optim::adam_update<false>(L.groups[gi].c, p, L.grad[i], m, v);
    L.param[i] = p;
    L.m32[i] = m;
    L.v32[i] = v;
    write_half(L, i, p);
  }
}

}  // namespace

cudaError_t adam8bit(const Adam8bitLaunch& launch, cudaStream_t stream) {
  if (launch.n <= 0 || launch.num_groups <= 0) return cudaSuccess;
  if (launch.m_code == nullptr) {
    int64_t blocks = (launch.n + kThreads - 1) / kThreads;
    if (blocks > 4096) blocks = 4096;
    adam8bit_fp32_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(launch);
    return cudaGetLastError();
  }
  if (launch.block < 1 || launch.block > zt::optim::kAdam8bitMaxCudaBlock) {
    return cudaErrorInvalidValue;
  }
  const int64_t blocks = (launch.n + launch.block - 1) / launch.block;
  const size_t shared = 2 * static_cast<size_t>(launch.block) * sizeof(float);
  adam8bit_quantized_kernel<<<static_cast<unsigned>(blocks), kThreads, shared, stream>>>(launch);
  return cudaGetLastError();
}

}  // namespace zt::optim::cuda_kernels
