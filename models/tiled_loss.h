#pragma once
// The head and the loss of a causal language model computed a tile of positions at a time (ALST's
// tiled logits and loss, DeepSpeed's TiledFusedLogitsLoss): the logits of a long sequence, V
// floats per position (128k for Llama 3), are the largest activation of a step; here the forward
// keeps none and the backward recomputes one tile's at a time, so the peak holds tile x V of them
// instead of T x V. The same sums as causal_lm_loss_total (models/causal_lm_loss.h) over
// logits = hidden @ weight^T, up to the order in which the weight's gradient adds the tiles: it
// adds them in fp32, one (V, C) fp32 buffer during the backward (the gradient's own size for an
// fp32 head, twice it for a 16-bit one), so a bf16 head's gradient is rounded once, not per tile.

#include <cstdint>

#include <torch/types.h>

namespace zt::models {

// hidden (B, T, C) and weight (V, C) in the compute dtype, labels (B, T) already shifted (-100 is
// ignored); `tile` positions of every row per tile (>= 1). Returns the fp32 sum of the token
// losses, differentiable in hidden and weight.
torch::Tensor tiled_causal_lm_loss_total(const torch::Tensor& hidden, const torch::Tensor& weight,
                                         const torch::Tensor& labels, int64_t tile);

}  // namespace zt::models
