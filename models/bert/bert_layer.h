#pragma once
// One post-LayerNorm encoder layer of the BERT example, as transformers' BertLayer computes it:
//   a = LayerNorm(x + dropout(dense(self_attention(x))))
//   y = LayerNorm(a + dropout(dense(gelu(dense(a)))))
// Submodules carry Hugging Face's names ("attention.self.query", "attention.output.LayerNorm",
// "intermediate.dense", "output.dense", ...), so a layer's parameter names are the file's.
// Layers are the stage-3 units of the model (zt::call_unit): a layer's parameters are gathered
// together, and, with activation checkpointing, its activations are recomputed together.

#include <torch/torch.h>

#include "models/bert/bert_config.h"

namespace zt::models {

// Dropout with probability p while training; x itself otherwise (BERT's hidden and attention
// dropouts, 0.1 by default, are off in evaluation).
torch::Tensor maybe_dropout(const torch::Tensor& x, double p, bool training);

// query, key, value (C, C) with biases; heads split as view(B, T, H, C/H), scores scaled by
// 1/sqrt(C/H), attention-probability dropout.
class BertSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit BertSelfAttentionImpl(const BertConfig& config);
  // x (B, T, C); mask (B, 1, 1, T) bool, true = a real key -> (B, T, C), the heads' contexts.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);

  torch::nn::Linear query{nullptr}, key{nullptr}, value{nullptr};

 private:
  int64_t heads_;
  double dropout_;
};
TORCH_MODULE(BertSelfAttention);

// dense, dropout, then LayerNorm with the residual: attention.output and output.
class BertResidualOutputImpl : public torch::nn::Module {
 public:
  BertResidualOutputImpl(int64_t in, const BertConfig& config);
  torch::Tensor forward(const torch::Tensor& h, const torch::Tensor& residual);

  torch::nn::Linear dense{nullptr};
  torch::nn::LayerNorm layer_norm{nullptr};  // "LayerNorm"

 private:
  double dropout_;
};
TORCH_MODULE(BertResidualOutput);

class BertAttentionImpl : public torch::nn::Module {
 public:
  explicit BertAttentionImpl(const BertConfig& config);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);

  BertSelfAttention self_attention{nullptr};  // "self"
  BertResidualOutput output{nullptr};
};
TORCH_MODULE(BertAttention);

class BertIntermediateImpl : public torch::nn::Module {
 public:
  explicit BertIntermediateImpl(const BertConfig& config);
  torch::Tensor forward(const torch::Tensor& x);  // gelu(dense(x)), exact GELU

  torch::nn::Linear dense{nullptr};
};
TORCH_MODULE(BertIntermediate);

class BertLayerImpl : public torch::nn::Module {
 public:
  explicit BertLayerImpl(const BertConfig& config);
  // x (B, T, C) -> (B, T, C). With activation checkpointing (in training) the layer keeps only
  // its input for backward and runs forward again there.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);
  // The layer itself, without checkpointing: what the checkpoint recomputes.
  torch::Tensor forward_impl(const torch::Tensor& x, const torch::Tensor& mask);

  BertAttention attention{nullptr};
  BertIntermediate intermediate{nullptr};
  BertResidualOutput output{nullptr};

 private:
  bool checkpoint_;
};
TORCH_MODULE(BertLayer);

}  // namespace zt::models
