#pragma once
// The GPT example's decoder: token + position embeddings, n_layer pre-LayerNorm blocks, a final
// LayerNorm and an output head tied to the token embedding (logits = x wte^T, no extra weight).
//
// Parameter names (what the engine, parameter groups and checkpoints see), in registration order:
//   wte.weight (V, C), wpe.weight (max_seq_len, C), ln_f.{weight,bias},
//   blocks.<i>.{ln1,attn.qkv,attn.proj,ln2,fc,out}.*
// Stage-3 units are "blocks.0" .. "blocks.<n_layer-1>" (unit_names()); wte, wpe and ln_f form
// the engine's root unit, gathered for the whole forward and backward.
//
// Construction consumes the RNG root first (wte, wpe: drawn and initialised), then block by block
// (each drawn and initialised before the next exists), so a partitioned build
// (core/zero/partitioned_init.h: every rank keeps only its slices, a block at a time) holds the
// same values as a whole one with the same seed.

#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/zero/partitioned_init.h"
#include "models/gpt/gpt_block.h"

namespace zt::models {

class GptImpl : public torch::nn::Module {
 public:
  // `partitioned`: ZeRO stage 3's partitioned construction (zt::Launch::partitioned); the root
  // and then each block are handed to it as soon as they are initialised. Null: built whole.
  explicit GptImpl(const GptShape& shape, zero::PartitionedInit* partitioned = nullptr);

  // input_ids (B, T) int64, attention_mask (B, T) int64 (1 = token, 0 = pad) -> logits (B, T, V)
  // in the compute dtype. Position t attends to positions <= t that are not padding. An undefined
  // attention_mask means no padding (plain causal attention, SDPA's fastest kernels).
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);
  // The trunk without the head: the final LayerNorm's output (B, T, C) in the compute dtype.
  torch::Tensor hidden(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);
  // Mean cross-entropy (fp32) over labels != -100; logits (B, T, V), labels (B, T).
  static torch::Tensor loss(const torch::Tensor& logits, const torch::Tensor& labels);
  // loss(forward(input_ids, attention_mask), labels), or with the shape's loss_tile_tokens the
  // same mean with the head and loss computed a tile of positions at a time, so that the (B, T,
  // V) logits are never held (models/tiled_loss.h; equal up to the order of the sums).
  torch::Tensor causal_lm_loss(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                               const torch::Tensor& labels);
  // Sum of the token losses and the number of tokens counted (for perplexity).
  static std::pair<double, int64_t> loss_sum(const torch::Tensor& logits,
                                             const torch::Tensor& labels);

  std::vector<std::string> unit_names() const;
  const GptShape& shape() const { return shape_; }
  int64_t num_parameters() const;

  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::Dropout drop{nullptr};  // null when dropout is 0

 private:
  void init_weights(torch::nn::Module& module, const std::string& prefix) const;
  GptShape shape_;
};
TORCH_MODULE(Gpt);

}  // namespace zt::models
