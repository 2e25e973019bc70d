// The kernel of FusedAdam (optim/fused_adam.h), compiled into the CUDA plugin for sm_90 + PTX.
// Grid: x strides over the elements of a group, y picks the group, so one launch covers up to
// kFusedAdamMaxGroups groups of any sizes. Per element, adam_formula.h's fused update: the
// rounding of CpuAdam's AVX2/AVX-512 builds, so results equal theirs bit for bit.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "optim/fused_adam_launch.h"

namespace zt::optim::cuda_kernels {
namespace {

__global__ void fused_adam_kernel(const zt::optim::FusedAdamLaunch launch) {
  const zt::optim::FusedAdamGroup& g = launch.groups[blockIdx.y];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = g.begin + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < g.end;
       i += stride) {
    float p = launch.param[i], m = launch.exp_avg[i], v = launch.exp_avg_sq[i];
    zt::optim::adam_update<true>(g.c, p, launch.grad[i], m, v);
    launch.param[i] = p;
    launch.exp_avg[i] = m;
    launch.exp_avg_sq[i] = v;
    if (launch.half_kind == 1) {
      static_cast<__half*>(launch.half_out)[i] = __float2half_rn(p);
    } else if (launch.half_kind == 2) {
      static_cast<__nv_bfloat16*>(launch.half_out)[i] = __float2bfloat16_rn(p);
    }
  }
}

}  // namespace

cudaError_t fused_adam(const zt::optim::FusedAdamLaunch& launch, cudaStream_t stream) {
  if (launch.num_groups <= 0) return cudaSuccess;
  int64_t longest = 0;
  for (int i = 0; i < launch.num_groups; ++i) {
    const int64_t n = launch.groups[i].end - launch.groups[i].begin;
    longest = n > longest ? n : longest;
  }
  constexpr int kThreads = 256;
  int64_t blocks = (longest + kThreads - 1) / kThreads;
  // Enough blocks to fill an H100/H200 several times over per group; the loop strides the rest.
  if (blocks > 2048) blocks = 2048;
  if (blocks < 1) blocks = 1;
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(launch.num_groups));
  fused_adam_kernel<<<grid, kThreads, 0, stream>>>(launch);
  return cudaGetLastError();
}

}  // namespace zt::optim::cuda_kernels
