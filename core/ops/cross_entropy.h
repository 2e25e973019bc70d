#pragma once
// The token cross-entropy of a language model's logits: fp32 loss over rows of logits, labels of
// -100 ignored (Hugging Face's ignore_index). One decision, made here per call from the logits:
//
//   logits on a CUDA device, fp32/fp16/bf16, CUDA plugin loaded  the fused kernel
//       (core/ops/cross_entropy.cu): reads the logits in their own type, keeps one fp32 lse per
//       row for backward, and writes the gradient in the logits' type in one pass; the loss and
//       the gradient are LibTorch's within fp32 rounding (and the gradient's final rounding)
//   anywhere else (the CPU, the test device)  LibTorch's ops: the logits widened to fp32, then
//       cross_entropy, bit for bit what the models computed before this file existed
//
// The models' losses (models/causal_lm_loss.h, models/tiled_loss.h) call only these.

#include <ATen/core/Tensor.h>

namespace zt::ops {

enum class TokenReduction { kMean, kSum };

// logits (N, V) fp32/fp16/bf16, labels (N) int64. kMean: the mean over the counted rows (NaN when
// none is counted, as LibTorch's); kSum: their sum. fp32, 0-dim, differentiable in logits.
at::Tensor token_cross_entropy(const at::Tensor& logits, const at::Tensor& labels,
                               TokenReduction reduction);

// The gradient of scale * (sum of the counted rows' losses) with respect to logits, in the logits'
// type: (softmax(logits) - one_hot(labels)) * scale on counted rows, 0 on ignored ones. scale: a
// 0-dim tensor on the logits' device (an upstream gradient). For a backward that recomputes the
// logits (models/tiled_loss.h) instead of keeping them.
at::Tensor token_cross_entropy_grad(const at::Tensor& logits, const at::Tensor& labels,
                                    const at::Tensor& scale);

// Whether the calls above take the fused kernel for these logits.
bool fused_cross_entropy(const at::Tensor& logits);

// Process-wide switch for the fused kernels (on by default): off, every call takes LibTorch's
// ops, so a benchmark can time both in one process.
void set_fused_kernels(bool on);

}  // namespace zt::ops
