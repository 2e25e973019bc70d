#pragma once
// One pass over a gradient buffer that both detects inf/NaN (fp16 overflow) and unscales it by
// 1/loss_scale. On CPU it is a vectorisable loop over threads; on CUDA, a kernel of the plugin.

#include <ATen/core/Tensor.h>

namespace zt {

// In place: t *= inv_scale (skipped when inv_scale == 1). Returns true when any element of t was
// inf or NaN. t: contiguous fp32, fp16 or bf16, CPU or CUDA.
bool check_and_unscale_(at::Tensor& t, float inv_scale);

// The same pass without waiting for its answer: sets found_inf[0] to 1 when any element of t was
// inf or NaN (never back to 0). found_inf: int32 [1] on t's device. On CUDA it only enqueues the
// kernel on LibTorch's current stream, so several buffers share one flag and one host
// synchronisation (the engine reads the flag once, after the ranks' vote).
void check_and_unscale_into_(at::Tensor& t, float inv_scale, at::Tensor& found_inf);

}  // namespace zt
