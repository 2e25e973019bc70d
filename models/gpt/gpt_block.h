#pragma once
// One pre-LayerNorm transformer block of the GPT example: x + attn(ln1(x)), then x + mlp(ln2(x)).
// Blocks are the stage-3 units of the model (zt::call_unit), so a block's parameters are gathered
// together, and, with activation checkpointing, its activations are recomputed together.

#include <string>

#include <torch/torch.h>

namespace zt::models {

struct GptShape {
  int64_t n_layer = 2;
  int64_t n_head = 2;
  int64_t d_model = 64;
  int64_t vocab_size = 256;
  int64_t max_seq_len = 64;
  double dropout = 0.0;  // 0 turns every dropout of the model off (no Dropout module at all)
  bool activation_checkpointing = false;
  // false: every position attends to every real token (an encoder, as the classifier example
  // uses the trunk); true: GPT's causal attention.
  bool causal = true;
  // The MLP's activation: "gelu" (exact, erf) or "gelu_new" (GPT-2's tanh approximation,
  // Hugging Face's activation_function "gelu_new"); hf_gpt2.h maps both to GPT-2's config.
  std::string activation = "gelu";
  // The head and the loss a tile of positions at a time (models/tiled_loss.h): positions per
  // tile, 0 = the whole logits at once. A training switch: GptImpl::causal_lm_loss reads it.
  int64_t loss_tile_tokens = 0;
};

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const GptShape& shape);
  // x (B, T, C); mask (B, 1, T, T) bool, true = may attend (causal AND key is not padding), or
  // (B, 1, 1, T) without causality, or undefined: causal only (no padding).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);

  torch::nn::Linear qkv{nullptr}, proj{nullptr};

 private:
  int64_t n_head_;
  double dropout_;
};
TORCH_MODULE(CausalSelfAttention);

class GptBlockImpl : public torch::nn::Module {
 public:
  explicit GptBlockImpl(const GptShape& shape);
  // x (B, T, C) -> (B, T, C). With activation checkpointing (in training) the block keeps only
  // its input for backward and runs forward again there.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);
  // The block itself, without checkpointing: what the checkpoint recomputes.
  torch::Tensor forward_impl(const torch::Tensor& x, const torch::Tensor& mask);

  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  CausalSelfAttention attn{nullptr};
  torch::nn::Linear fc{nullptr}, out{nullptr};
  torch::nn::Dropout drop{nullptr};  // null when dropout is 0

 private:
  bool checkpoint_;
  std::string gelu_approximate_;  // at::gelu's `approximate`: "none" or "tanh"
};
TORCH_MODULE(GptBlock);

}  // namespace zt::models
