#pragma once
// The shape of a LLaMA-family decoder (llama_model.h): what a Hugging Face config.json of
// model_type llama, qwen2, mistral, mixtral, qwen2_moe or qwen3_moe says, in that file's own key
// names. They share one architecture (pre-RMSNorm layers, rotary positions, grouped-query
// attention, SwiGLU MLPs) and differ only in what LlamaShape records: which projections carry
// biases, which layers attend through a sliding window, whether queries and keys are normalised
// per head (Qwen3), and which layers route each token to a few of many experts (MoeShape).

#include <cstdint>
#include <string>
#include <vector>

namespace zt::models {

// Rotary embedding frequencies (transformers' modeling_rope_utils.py): "default" (theta only),
// "linear" (every frequency divided by factor) or "llama3" (Llama 3.1's band-wise rescaling of
// the long wavelengths, which reads the other three fields).
struct RopeScaling {
  std::string type = "default";
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
};

// A mixture of experts in place of a layer's MLP (llama_moe.h), as
// transformers' Mixtral, Qwen2-MoE and Qwen3-MoE define it: a router picks num_experts_per_tok of
// num_experts SwiGLU experts per token by softmax, top-k. num_experts 0: a dense model.
struct MoeShape {
  int64_t num_experts = 0;          // Mixtral's num_local_experts, Qwen's num_experts
  int64_t num_experts_per_tok = 2;  // k
  int64_t intermediate_size = 0;    // each expert's (Qwen's moe_intermediate_size)
  // Qwen2-MoE: a dense SwiGLU expert every token takes, gated by sigmoid(shared_expert_gate x);
  // 0 = none.
  int64_t shared_expert_intermediate_size = 0;
  // Divide the k weights by their sum (Mixtral always; Qwen's norm_topk_prob).
  bool norm_topk_prob = true;
  // Mixtral scales each expert's output by its fp32 weight; Qwen first casts the weights to the
  // compute dtype. The same in fp32; in bf16 it changes the last bits.
  bool fp32_expert_weights = false;
  // Which layers route: Qwen's (i + 1) % decoder_sparse_step == 0 and i not in mlp_only_layers;
  // Mixtral every layer. The others keep a dense MLP of LlamaShape::intermediate_size.
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  // transformers' output_router_logits: whether the loss includes router_aux_loss_coef times the
  // load-balancing loss (models/load_balancing_loss.h). Off by default there, so here.
  bool output_router_logits = false;
  double router_aux_loss_coef = 0.001;
  // Ours: the load-balancing loss from every data-parallel rank's routing counts (one process's
  // loss over the whole batch) rather than each rank's own tokens (transformers, DeepSpeed).
  bool global_router_aux_loss = false;
  // DeepSpeed's MoE layer capacity (models/llama/moe_capacity.h; its capacity_factor,
  // eval_capacity_factor, min_capacity and drop_policy, as model keys moe_*): 0 = no capacity,
  // every token reaches its experts (transformers). eval_capacity_factor < 0: the training one.
  double capacity_factor = 0;
  double eval_capacity_factor = -1;
  int64_t min_capacity = 4;
  std::string drop_policy = "probs";

  bool routes(int64_t layer) const {
    if (num_experts == 0 || (layer + 1) % decoder_sparse_step != 0) return false;
    for (int64_t l : mlp_only_layers) {
      if (l == layer) return false;
    }
    return true;
  }
};

// Whether two mixtures are the same model (the loss switches aside).
bool same_experts(const MoeShape& a, const MoeShape& b);

struct LlamaShape {
  // llama | qwen2 | mistral | mixtral | qwen2_moe | qwen3_moe
  std::string model_type = "llama";
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;  // < heads: grouped-query attention
  int64_t head_dim = 128;            // hidden_size / heads unless the config says otherwise
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // Llama's attention_bias, Qwen2 always
  bool o_bias = false;    // Llama's attention_bias
  bool mlp_bias = false;  // Llama's mlp_bias
  bool qk_norm = false;   // Qwen3: RMSNorm over head_dim of each query and key head before rotary
  double attention_dropout = 0.0;
  // Per layer: 0 = full causal attention, w > 0 = a key at position k is seen from query q only
  // when q - w < k <= q (Mistral's sliding_window, Qwen2's sliding layers).
  std::vector<int64_t> layer_windows;
  // The model's own switch for zt::checkpoint_activations around each decoder layer (the
  // config's activation_checkpointing block sets how, core/activations/activation_checkpoint.h).
  bool activation_checkpointing = false;
  // The model's own switch for a tiled head and loss (models/tiled_loss.h): positions per tile,
  // 0 = the whole logits at once. A training switch, like activation_checkpointing.
  int64_t loss_tile_tokens = 0;
  // The same for each decoder layer's MLP (models/tiled_mlp.h): positions per tile, 0 = whole.
  int64_t mlp_tile_tokens = 0;
  MoeShape moe;

  bool is_moe() const { return moe.num_experts > 0; }
  int64_t window(int64_t layer) const {
    return layer < static_cast<int64_t>(layer_windows.size()) ? layer_windows[layer] : 0;
  }
  // Throws one zt::Error naming `source` for an inconsistent shape (heads not dividing, ...).
  void validate(const std::string& source) const;
  // Throw the line naming a split of `parts` ranks the model cannot take: a tensor split of a
  // mixture (its experts are not split over a tensor group); an expert split of a dense model or
  // of experts it does not divide. One rank is always fine.
  void check_tensor_split(int64_t parts) const;
  void check_expert_split(int64_t parts) const;
};

}  // namespace zt::models
