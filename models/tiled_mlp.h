#pragma once
// A position-wise module computed a tile of positions at a time (ALST's TiledMLP): an MLP over a
// long sequence holds its intermediate activations (for SwiGLU, three (B, T, intermediate)
// tensors, several times the hidden size) for the backward; here the forward keeps only the
// input, and the backward recomputes one tile's activations at a time, so the peak holds
// tile x intermediate of them instead of T x intermediate. The values are the untiled module's
// (each position's output depends on that position alone); the weights' gradients add the tiles'
// in fp32 and are handed to autograd once, so gradient hooks (ZeRO's reduction) fire once per
// backward, as without tiling.

#include <cstdint>
#include <functional>

#include <torch/nn/module.h>
#include <torch/types.h>

namespace zt::models {

using PositionwiseFn = std::function<torch::Tensor(const torch::Tensor&)>;

// fn(x) for x (B, T, C), `tile` positions of every row at a time (>= 1). fn computes `module`'s
// output (B, T, C') from its input and may run collectives (every rank of a group tiles the same
// T the same way); its trainable parameters get their gradients through this call. Both `fn`
// and `module` must outlive the backward (the module's own member and the module itself).
torch::Tensor tiled_over_positions(torch::nn::Module& module, const PositionwiseFn& fn,
                                   const torch::Tensor& x, int64_t tile);

}  // namespace zt::models
