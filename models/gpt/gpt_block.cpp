#include "models/gpt/gpt_block.h"

#include "base/error.h"
#include "models/checkpointed_forward.h"

namespace zt::models {

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GptShape& s)
    : n_head_(s.n_head), dropout_(s.dropout) {
  qkv = register_module("qkv", torch::nn::Linear(s.d_model, 3 * s.d_model));
  proj = register_module("proj", torch::nn::Linear(s.d_model, s.d_model));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2), d = c / n_head_;
  std::vector<torch::Tensor> parts = qkv->forward(x).chunk(3, -1);
  // (B, T, C) -> (B, H, T, C/H)
  auto heads = [&](const torch::Tensor& y) { return y.view({b, t, n_head_, d}).transpose(1, 2); };
  const double p = is_training() ? dropout_ : 0.0;
  // No mask: plain causal attention, which lets SDPA pick its flash kernel on a GPU.
  torch::Tensor y = mask.defined() ? at::scaled_dot_product_attention(
                                         heads(parts[0]), heads(parts[1]), heads(parts[2]), mask, p)
                                   : at::scaled_dot_product_attention(
                                         heads(parts[0]), heads(parts[1]), heads(parts[2]), {}, p,
                                         /*is_causal=*/true);
  return proj->forward(y.transpose(1, 2).reshape({b, t, c}));
}

GptBlockImpl::GptBlockImpl(const GptShape& s)
    : checkpoint_(s.activation_checkpointing),
      gelu_approximate_(s.activation == "gelu_new" ? "tanh" : "none") {
  ZT_CHECK(s.activation == "gelu" || s.activation == "gelu_new",
           "gpt: activation must be gelu or gelu_new, got '", s.activation, "'");
  ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({s.d_model})));
  attn = register_module("attn", CausalSelfAttention(s));
  ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({s.d_model})));
  fc = register_module("fc", torch::nn::Linear(s.d_model, 4 * s.d_model));
  out = register_module("out", torch::nn::Linear(4 * s.d_model, s.d_model));
  if (s.dropout > 0) drop = register_module("drop", torch::nn::Dropout(s.dropout));
}

torch::Tensor GptBlockImpl::forward_impl(const torch::Tensor& x, const torch::Tensor& mask) {
  torch::Tensor a = attn->forward(ln1->forward(x), mask);
  torch::Tensor h = x + (drop ? drop->forward(a) : a);
  torch::Tensor m = out->forward(torch::gelu(fc->forward(ln2->forward(h)), gelu_approximate_));
  return h + (drop ? drop->forward(m) : m);
}

torch::Tensor GptBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  return checkpointed_forward(
      checkpoint_, *this,
      [this](const std::vector<torch::Tensor>& in) { return forward_impl(in[0], in[1]); },
      {x, mask});
}

}  // namespace zt::models
