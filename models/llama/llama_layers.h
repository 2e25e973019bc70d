#pragma once
// The pieces of a LLaMA-family decoder layer, computing what transformers' modeling_llama.py,
// modeling_qwen2.py and modeling_mistral.py compute, under the same parameter names, so a Hugging
// Face checkpoint loads by name (hf_llama.h):
//
//   input_layernorm.weight, self_attn.{q,k,v,o}_proj.{weight,bias?},
//   self_attn.{q,k}_norm.weight (Qwen3: over head_dim, shared by the heads),
//   post_attention_layernorm.weight, mlp.{gate,up,down}_proj.{weight,bias?}
//   (a routed layer's mlp: llama_moe.h)

#include <memory>
#include <optional>
#include <vector>

#include <torch/torch.h>

#include "models/llama/llama_shape.h"
#include "models/tiled_mlp.h"
#include "parallel/communicator.h"

namespace zt::models {

// A sequence split over the ranks of `group` (Ulysses: parallel/sequence_exchange.h): each rank
// holds T / sp consecutive positions, and attention exchanges heads for positions around its
// core. `wire`: the exchange's dtype (seq_parallel_communication_data_type).
struct SequenceSplit {
  std::shared_ptr<dist::Communicator> group;
  std::optional<at::ScalarType> wire;
  int64_t parts() const { return group ? group->size() : 1; }
  int64_t index() const { return group ? group->rank() : 0; }
};

// Layers split over the ranks of a tensor group (parallel/tensor_parallel.h, DeepSpeed AutoTP's
// LLaMA preset): q, k, v, gate and up by output features (whole heads), o and down by input
// features, whose partial outputs one all-reduce adds before their bias.
struct TensorSplit {
  std::shared_ptr<dist::Communicator> group;
  int64_t parts() const { return group ? group->size() : 1; }
  int64_t index() const { return group ? group->rank() : 0; }
};

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
  // for plain causal attention. Under a sequence split, x, cos and sin hold this rank's T / sp
  // positions and the mask spans the whole sequence.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask);

  // Attention over a sequence split (null: not split). Key/value heads that divide over the group
  // split evenly; fewer than the group and dividing it are replicated (DeepSpeed's
  // UlyssesSPAttentionHF); more that do not divide split unevenly, whole heads with their query
  // heads (DeepSpeed's DistributedAttention); else (fewer, not dividing) a zt::Error naming them.
  void set_sequence_split(std::shared_ptr<const SequenceSplit> split);
  // Keeps this rank's heads of q, k, v and its columns of o (before any sequence split): the
  // heads and key/value heads must divide over the group, else a zt::Error naming the counts.
  void set_tensor_split(std::shared_ptr<const TensorSplit> split);

  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RmsNorm q_norm{nullptr}, k_norm{nullptr};  // with LlamaShape::qk_norm

 private:
  torch::Tensor project_out(const torch::Tensor& y);
  // y (B, T, n * D) -> (B, T, n, D), normalised per head when the model has `norm`.
  torch::Tensor per_head(const torch::Tensor& y, int64_t n, RmsNorm& norm) const;

  torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const torch::Tensor& mask);
  torch::Tensor split_forward(const torch::Tensor& x, const torch::Tensor& cos,
                              const torch::Tensor& sin, const torch::Tensor& mask);

  int64_t heads_, kv_heads_, head_dim_;  // this rank's, under a tensor split
  // Under a sequence split whose group does not divide the key/value heads: each rank's heads
  // (dist::kv_heads_per_rank); empty when they split evenly.
  std::vector<int64_t> q_per_rank_, kv_per_rank_;
  double dropout_;
  std::shared_ptr<const SequenceSplit> split_;
  std::shared_ptr<const TensorSplit> tensor_;
};
TORCH_MODULE(LlamaAttention);

// down_proj(silu(gate_proj(x)) * up_proj(x))
class LlamaMlpImpl : public torch::nn::Module {
 public:
  explicit LlamaMlpImpl(const LlamaShape& shape);
  torch::Tensor forward(const torch::Tensor& x);
  // Keeps this rank's intermediate features of gate, up and down; they must divide over the
  // group.
  void set_tensor_split(std::shared_ptr<const TensorSplit> split);
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};

 private:
  torch::Tensor forward_whole(const torch::Tensor& x);
  std::shared_ptr<const TensorSplit> tensor_;
  int64_t tile_ = 0;      // LlamaShape::mlp_tile_tokens
  PositionwiseFn whole_;  // forward_whole, for the tiled backward's recompute
};
TORCH_MODULE(LlamaMlp);

class SparseMoeBlockImpl;
class RouterStats;

// h = x + self_attn(input_layernorm(x)); out = h + mlp(post_attention_layernorm(h)), `mlp` a
// mixture of experts in the layers the shape routes (llama_moe.h). A stage-3 unit
// (zt::call_unit); with the shape's activation_checkpointing, in training, it keeps only its
// inputs and runs again in its backward (zt::checkpoint_activations).
class LlamaDecoderLayerImpl : public torch::nn::Module {
 public:
  // `index`: the layer's place (which layers route); `stats`: the model's router statistics.
  LlamaDecoderLayerImpl(const LlamaShape& shape, int64_t index = 0,
                        std::shared_ptr<RouterStats> stats = nullptr);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask);
  torch::Tensor forward_impl(const torch::Tensor& x, const torch::Tensor& cos,
                             const torch::Tensor& sin, const torch::Tensor& mask);

  RmsNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  LlamaAttention self_attn{nullptr};
  LlamaMlp mlp{nullptr};                    // a dense layer's
  std::shared_ptr<SparseMoeBlockImpl> moe;  // a routed layer's, registered as `mlp`

 private:
  bool checkpoint_;
};
TORCH_MODULE(LlamaDecoderLayer);

}  // namespace zt::models
