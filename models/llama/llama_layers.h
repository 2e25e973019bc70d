#pragma once
// The pieces of a LLaMA-family decoder layer, computing what transformers' modeling_llama.py,
// modeling_qwen2.py and modeling_mistral.py compute, under the same parameter names, so a Hugging
// Face checkpoint loads by name (hf_llama.h):
//
//   input_layernorm.weight, self_attn.{q,k,v,o}_proj.{weight,bias?},
//   post_attention_layernorm.weight, mlp.{gate,up,down}_proj.{weight,bias?}

#include <torch/torch.h>

#include "models/llama/llama_shape.h"

namespace zt::models {

// y = weight * (x / sqrt(mean(x^2) + eps)), normalised in fp32 and cast back to x's dtype before
// the weight multiplies it (as LlamaRMSNorm does, which matters in bf16).
class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RmsNorm);

// The rotary embedding's inverse frequencies (head_dim / 2, fp32) for the shape's rope_theta and
// rope_scaling; throws for a scaling type it does not compute.
torch::Tensor rope_inverse_frequencies(const LlamaShape& shape);
// cos and sin (1, T, head_dim) for positions 0..T-1, computed in fp32 and cast to `dtype`.
std::pair<torch::Tensor, torch::Tensor> rope_cos_sin(const torch::Tensor& inv_freq, int64_t t,
                                                     torch::ScalarType dtype);

class LlamaAttentionImpl : public torch::nn::Module {
 public:
  explicit LlamaAttentionImpl(const LlamaShape& shape);
  // x (B, T, C); cos/sin (1, T, D); mask (B or 1, 1, T, T) bool (true = may attend) or undefined
  // for plain causal attention.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask);

  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};

 private:
  int64_t heads_, kv_heads_, head_dim_;
  double dropout_;
};
TORCH_MODULE(LlamaAttention);

// down_proj(silu(gate_proj(x)) * up_proj(x))
class LlamaMlpImpl : public torch::nn::Module {
 public:
  explicit LlamaMlpImpl(const LlamaShape& shape);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(LlamaMlp);

// h = x + self_attn(input_layernorm(x)); out = h + mlp(post_attention_layernorm(h)). A stage-3
// unit (zt::call_unit); with the shape's activation_checkpointing, in training, it keeps only its
// inputs and runs again in its backward (zt::checkpoint_activations).
class LlamaDecoderLayerImpl : public torch::nn::Module {
 public:
  explicit LlamaDecoderLayerImpl(const LlamaShape& shape);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask);
  torch::Tensor forward_impl(const torch::Tensor& x, const torch::Tensor& cos,
                             const torch::Tensor& sin, const torch::Tensor& mask);

  RmsNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  LlamaAttention self_attn{nullptr};
  LlamaMlp mlp{nullptr};

 private:
  bool checkpoint_;
};
TORCH_MODULE(LlamaDecoderLayer);

}  // namespace zt::models
