#pragma once
// One pass over a gradient buffer that both detects inf/NaN (fp16 overflow) and unscales it by
// 1/loss_scale. On CPU it is a vectorisable loop over threads; on CUDA, a kernel of the plugin.

#include <ATen/core/Tensor.h>

namespace zt {

// In place: t *= inv_scale (skipped when inv_scale == 1). Returns true when any element of t was
// inf or NaN. t: contiguous fp32, fp16 or bf16, CPU or CUDA.
bool check_and_unscale_(at::Tensor& t, float inv_scale);

}  // namespace zt
