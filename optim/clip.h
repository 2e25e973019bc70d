#pragma once
// Gradient clipping by global norm over ZeRO shards, with torch.nn.utils.clip_grad_norm_'s
// semantics. Each rank computes sum_of_squares() of its own gradient slice, the engine sums that
// across ranks (all_reduce), takes the square root, and scales every local slice by
// clip_coefficient(global_norm, max_norm):
//
//   double local = zt::optim::sum_of_squares(grad_slice);
//   double norm = std::sqrt(all_reduce_sum(local));
//   grad_slice.mul_(zt::optim::clip_coefficient(norm, max_norm));   // skip when it returns 1

#include <ATen/core/Tensor.h>

namespace zt::optim {

// max_norm / (global_norm + 1e-6), capped at 1, as torch (1e-6 keeps it finite at norm 0).
// max_norm <= 0 means no clipping (DeepSpeed's gradient_clipping = 0): returns 1. A non-finite
// global_norm gives 0 for inf and NaN for NaN, as torch's formula does; the engine's overflow
// check is expected to skip such steps before clipping.
double clip_coefficient(double global_norm, double max_norm);

// Sum of squares of a flat fp32/fp16/bf16 tensor (any device), accumulated in fp64 so that the
// cross-rank sum of many shards stays exact enough; CPU fp32 runs one multi-threaded pass.
double sum_of_squares(const at::Tensor& flat);

}  // namespace zt::optim
