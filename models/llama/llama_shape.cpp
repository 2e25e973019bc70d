#include "models/llama/llama_shape.h"

#include "base/error.h"

namespace zt::models {

bool same_experts(const MoeShape& a, const MoeShape& b) {
  return a.num_experts == b.num_experts && a.num_experts_per_tok == b.num_experts_per_tok &&
         a.intermediate_size == b.intermediate_size &&
         a.shared_expert_intermediate_size == b.shared_expert_intermediate_size &&
         a.norm_topk_prob == b.norm_topk_prob && a.fp32_expert_weights == b.fp32_expert_weights &&
         a.decoder_sparse_step == b.decoder_sparse_step && a.mlp_only_layers == b.mlp_only_layers;
}

void LlamaShape::validate(const std::string& source) const {
  const bool moe_type =
      model_type == "mixtral" || model_type == "qwen2_moe" || model_type == "qwen3_moe";
  ZT_CHECK(model_type == "llama" || model_type == "qwen2" || model_type == "mistral" || moe_type,
           source, ": model_type '", model_type,
           "' is not llama, qwen2, mistral, mixtral, qwen2_moe or qwen3_moe");
  if (moe_type) {
    ZT_CHECK(moe.num_experts >= 1, source, ": a ", model_type, " model needs num_experts >= 1");
    ZT_CHECK(moe.num_experts_per_tok >= 1 && moe.num_experts_per_tok <= moe.num_experts, source,
             ": num_experts_per_tok ", moe.num_experts_per_tok, " must be in [1, num_experts ",
             moe.num_experts, "]");
    ZT_CHECK(moe.intermediate_size >= 1, source, ": the experts' intermediate size must be >= 1");
    ZT_CHECK(moe.shared_expert_intermediate_size >= 0, source,
             ": shared_expert_intermediate_size must be >= 0");
    ZT_CHECK(moe.decoder_sparse_step >= 1, source, ": decoder_sparse_step must be >= 1, got ",
             moe.decoder_sparse_step);
    ZT_CHECK(moe.router_aux_loss_coef >= 0, source, ": router_aux_loss_coef must be >= 0");
    ZT_CHECK(moe.capacity_factor >= 0, source,
             ": moe_capacity_factor must be >= 0 (0 = none), got ", moe.capacity_factor);
    ZT_CHECK(moe.min_capacity >= 0, source, ": moe_min_capacity must be >= 0, got ",
             moe.min_capacity);
    ZT_CHECK(moe.drop_policy == "probs" || moe.drop_policy == "position", source,
             ": moe_drop_policy must be \"probs\" or \"position\", got \"", moe.drop_policy, "\"");
  } else {
    ZT_CHECK(moe.num_experts == 0, source, ": model_type ", model_type, " has no experts");
  }
  ZT_CHECK(vocab_size >= 1 && hidden_size >= 1 && intermediate_size >= 1 &&
               num_hidden_layers >= 1 && num_attention_heads >= 1 && num_key_value_heads >= 1 &&
               max_position_embeddings >= 1,
           source, ": sizes must be >= 1");
  ZT_CHECK(num_attention_heads % num_key_value_heads == 0, source, ": num_attention_heads ",
           num_attention_heads, " is not a multiple of num_key_value_heads ", num_key_value_heads);
  ZT_CHECK(head_dim >= 2 && head_dim % 2 == 0, source, ": head_dim ", head_dim,
           " must be even (rotary embeddings rotate pairs)");
  ZT_CHECK(rms_norm_eps > 0, source, ": rms_norm_eps must be > 0, got ", rms_norm_eps);
  ZT_CHECK(loss_tile_tokens >= 0, source, ": loss_tile_tokens must be >= 0 (0 = untiled), got ",
           loss_tile_tokens);
  ZT_CHECK(mlp_tile_tokens >= 0, source, ": mlp_tile_tokens must be >= 0 (0 = untiled), got ",
           mlp_tile_tokens);
  ZT_CHECK(rope_theta > 0, source, ": rope_theta must be > 0, got ", rope_theta);
  ZT_CHECK(attention_dropout >= 0 && attention_dropout < 1, source,
           ": attention_dropout must be in [0, 1), got ", attention_dropout);
  const RopeScaling& r = rope_scaling;
  ZT_CHECK(r.type == "default" || r.type == "linear" || r.type == "llama3", source, ": rope type '",
           r.type, "' is not default, linear or llama3");
  if (r.type != "default") {
    ZT_CHECK(r.factor > 0, source, ": rope factor must be > 0, got ", r.factor);
  }
  if (r.type == "llama3") {
    ZT_CHECK(r.original_max_position_embeddings >= 1 && r.high_freq_factor > r.low_freq_factor &&
                 r.low_freq_factor > 0,
             source,
             ": llama3 rope needs original_max_position_embeddings >= 1 and "
             "high_freq_factor > low_freq_factor > 0");
  }
  ZT_CHECK(layer_windows.empty() || static_cast<int64_t>(layer_windows.size()) == num_hidden_layers,
           source, ": ", layer_windows.size(), " layer windows for ", num_hidden_layers, " layers");
  for (int64_t w : layer_windows) {
    ZT_CHECK(w >= 0, source, ": sliding_window must be >= 1, got ", w);
  }
}

void LlamaShape::check_tensor_split(int64_t parts) const {
  if (parts <= 1) return;
  ZT_CHECK(!is_moe(), "tensor_parallel.autotp_size ", parts, ": ", model_type,
           "'s experts are not split over a tensor group");
}

void LlamaShape::check_expert_split(int64_t parts) const {
  if (parts <= 1) return;
  ZT_CHECK(is_moe(), "expert_parallel.autoep_size ", parts, ": ", model_type,
           " has no experts (set it to 1)");
  ZT_CHECK(moe.num_experts % parts == 0, "expert_parallel.autoep_size ", parts,
           " does not divide the ", moe.num_experts, " experts of a layer");
}

}  // namespace zt::models
