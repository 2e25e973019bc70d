#include "models/bert/bert_layer.h"

#include "models/checkpointed_forward.h"

namespace zt::models {

torch::Tensor maybe_dropout(const torch::Tensor& x, double p, bool training) {
  return training && p > 0 ? torch::dropout(x, p, true) : x;
}

BertSelfAttentionImpl::BertSelfAttentionImpl(const BertConfig& c)
    : heads_(c.num_attention_heads), dropout_(c.attention_probs_dropout_prob) {
  query = register_module("query", torch::nn::Linear(c.hidden_size, c.hidden_size));
  key = register_module("key", torch::nn::Linear(c.hidden_size, c.hidden_size));
  value = register_module("value", torch::nn::Linear(c.hidden_size, c.hidden_size));
}

torch::Tensor BertSelfAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2), d = c / heads_;
  // (B, T, C) -> (B, H, T, C/H)
  auto split = [&](const torch::Tensor& y) { return y.view({b, t, heads_, d}).transpose(1, 2); };
  torch::Tensor y = at::scaled_dot_product_attention(
      split(query->forward(x)), split(key->forward(x)), split(value->forward(x)), mask,
      is_training() ? dropout_ : 0.0);
  return y.transpose(1, 2).reshape({b, t, c});
}

BertResidualOutputImpl::BertResidualOutputImpl(int64_t in, const BertConfig& c)
    : dropout_(c.hidden_dropout_prob) {
  dense = register_module("dense", torch::nn::Linear(in, c.hidden_size));
  layer_norm = register_module(
      "LayerNorm",
      torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden_size}).eps(c.layer_norm_eps)));
}

torch::Tensor BertResidualOutputImpl::forward(const torch::Tensor& h,
                                              const torch::Tensor& residual) {
  return layer_norm->forward(maybe_dropout(dense->forward(h), dropout_, is_training()) + residual);
}

BertAttentionImpl::BertAttentionImpl(const BertConfig& c) {
  self_attention = register_module("self", BertSelfAttention(c));
  output = register_module("output", BertResidualOutput(c.hidden_size, c));
}

torch::Tensor BertAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  return output->forward(self_attention->forward(x, mask), x);
}

BertIntermediateImpl::BertIntermediateImpl(const BertConfig& c) {
  dense = register_module("dense", torch::nn::Linear(c.hidden_size, c.intermediate_size));
}

torch::Tensor BertIntermediateImpl::forward(const torch::Tensor& x) {
  return torch::gelu(dense->forward(x));
}

BertLayerImpl::BertLayerImpl(const BertConfig& c) : checkpoint_(c.activation_checkpointing) {
  attention = register_module("attention", BertAttention(c));
  intermediate = register_module("intermediate", BertIntermediate(c));
  output = register_module("output", BertResidualOutput(c.intermediate_size, c));
}

torch::Tensor BertLayerImpl::forward_impl(const torch::Tensor& x, const torch::Tensor& mask) {
  torch::Tensor a = attention->forward(x, mask);
  return output->forward(intermediate->forward(a), a);
}

torch::Tensor BertLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  return checkpointed_forward(
      checkpoint_, *this,
      [this](const std::vector<torch::Tensor>& in) { return forward_impl(in[0], in[1]); },
      {x, mask});
}

}  // namespace zt::models
