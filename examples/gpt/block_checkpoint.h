#pragma once
// Activation checkpointing for one GPT block (DeepSpeed's activation_checkpointing, reentrant
// like torch.utils.checkpoint): forward runs the block without building a graph and saves only
// its input; backward runs the block's forward again with grad on and back-propagates through
// that, so the block's intermediate activations (attention scores, the 4C MLP hidden) live only
// while that one block's backward runs. The CPU RNG state is saved and restored around the
// recomputation so dropout masks are the same both times.
//
// Stage 3: the engine gathers the block's parameters again just before its backward (a hook on
// the block output, core/zero/call_unit.h), which is exactly when the recomputation needs them.

#include <torch/torch.h>

namespace zt::examples {

class GptBlockImpl;

// The block's output for (x, mask), recomputed in backward. mask carries no gradient.
torch::Tensor checkpoint_block(GptBlockImpl& block, const torch::Tensor& x,
                               const torch::Tensor& mask);

}  // namespace zt::examples
