#include "models/llama/llama_config.h"

#include <algorithm>

#include "base/error.h"

namespace zt::models {
namespace {

// The experts' keys (MoeShape), in transformers' names; Mixtral's experts take intermediate_size
// and num_local_experts, as its config.json says.
void read_experts(ProgramBlockReader& r, LlamaShape& s) {
  MoeShape& m = s.moe;
  const bool mixtral = s.model_type == "mixtral";
  const bool qwen = s.model_type == "qwen2_moe" || s.model_type == "qwen3_moe";
  if (!mixtral && !qwen) return;
  if (m.num_experts == 0) {  // from scratch: transformers' defaults for the type
    m.num_experts = 8;
    m.norm_topk_prob = mixtral;
    m.fp32_expert_weights = mixtral;
  }
  r.field(mixtral ? "num_local_experts" : "num_experts", m.num_experts);
  r.field("num_experts_per_tok", m.num_experts_per_tok);
  if (mixtral) {
    m.intermediate_size = s.intermediate_size;
  } else {
    if (m.intermediate_size == 0) m.intermediate_size = s.intermediate_size;
    r.field("moe_intermediate_size", m.intermediate_size);
    r.field("norm_topk_prob", m.norm_topk_prob);
    r.field("decoder_sparse_step", m.decoder_sparse_step);
    std::vector<double> dense(m.mlp_only_layers.begin(), m.mlp_only_layers.end());
    r.field("mlp_only_layers", dense);
    m.mlp_only_layers.assign(dense.begin(), dense.end());
    if (s.model_type == "qwen2_moe") {
      r.field("shared_expert_intermediate_size", m.shared_expert_intermediate_size);
    }
  }
  r.field("output_router_logits", m.output_router_logits);
  r.field("router_aux_loss_coef", m.router_aux_loss_coef);
  r.field("global_router_aux_loss", m.global_router_aux_loss);
  r.field("moe_capacity_factor", m.capacity_factor);
  r.field("moe_eval_capacity_factor", m.eval_capacity_factor);
  r.field("moe_min_capacity", m.min_capacity);
  r.field("moe_drop_policy", m.drop_policy);
  s.qk_norm = s.model_type == "qwen3_moe";
}

// The block's keys over `s` (keys absent keep s's values). `bias` and `window`: the values of
// attention_bias and sliding_window afterwards (what `s` implies when absent).
void read_block(ProgramBlockReader& r, LlamaShape& s, bool* bias, int64_t* window) {
  r.field("model_type", s.model_type);
  r.field("vocab_size", s.vocab_size);
  r.field("hidden_size", s.hidden_size);
  r.field("intermediate_size", s.intermediate_size);
  r.field("num_hidden_layers", s.num_hidden_layers);
  r.field("num_attention_heads", s.num_attention_heads);
  r.field("num_key_value_heads", s.num_key_value_heads);
  r.field("head_dim", s.head_dim);
  r.field("max_position_embeddings", s.max_position_embeddings);
  r.field("rms_norm_eps", s.rms_norm_eps);
  r.field("rope_theta", s.rope_theta);
  r.field("rope_type", s.rope_scaling.type);
  r.field("rope_factor", s.rope_scaling.factor);
  r.field("rope_low_freq_factor", s.rope_scaling.low_freq_factor);
  r.field("rope_high_freq_factor", s.rope_scaling.high_freq_factor);
  r.field("rope_original_max_position_embeddings", s.rope_scaling.original_max_position_embeddings);
  r.field("tie_word_embeddings", s.tie_word_embeddings);
  *bias = s.o_bias || (s.model_type != "qwen2" && s.model_type != "qwen2_moe" && s.qkv_bias);
  r.field("attention_bias", *bias);
  r.field("mlp_bias", s.mlp_bias);
  r.field("attention_dropout", s.attention_dropout);
  *window = s.layer_windows.empty() ? 0 : s.layer_windows.front();
  r.field("sliding_window", *window);
  r.field("activation_checkpointing", s.activation_checkpointing);
  r.field("loss_tile_tokens", s.loss_tile_tokens);
  r.field("mlp_tile_tokens", s.mlp_tile_tokens);
  read_experts(r, s);
  r.check(!((s.model_type == "mistral" || s.model_type == "mixtral") && *bias), "attention_bias",
          s.model_type, " has no attention biases");
  r.check(!((s.model_type == "qwen2" || s.model_type == "qwen2_moe") && *bias), "attention_bias",
          s.model_type, "'s biases are fixed (q/k/v yes, o no); leave attention_bias out");
  r.check(*window >= 0, "sliding_window", "must be >= 0 (0 = none), got ", *window);
}

// The keys a config may set over pretrained weights: how to train, not what the model is.
bool training_switch(const std::string& k) {
  for (const char* t :
       {"activation_checkpointing", "attention_dropout", "loss_tile_tokens", "mlp_tile_tokens",
        "output_router_logits", "router_aux_loss_coef", "global_router_aux_loss",
        "moe_capacity_factor", "moe_eval_capacity_factor", "moe_min_capacity", "moe_drop_policy"}) {
    if (k == t) return true;
  }
  return false;
}

// Biases and windows as the model type and the block's keys say.
void apply_block(LlamaShape& s, bool bias, int64_t window, bool window_set) {
  if (s.model_type == "qwen2" || s.model_type == "qwen2_moe") {
    s.qkv_bias = true;
    s.o_bias = false;
  } else {
    s.qkv_bias = s.o_bias = bias;
  }
  if (window_set) s.layer_windows.assign(s.num_hidden_layers, window);
}

}  // namespace

LlamaShape llama_shape_from_config(const ProgramBlock& model, int64_t shard_vocab_size) {
  ZT_CHECK(!model.empty(), "the config has no `", model.name(), "` block (the model's shape)");
  LlamaShape s;
  s.head_dim = 0;  // 0 until read: hidden_size / heads
  s.num_key_value_heads = 0;
  ProgramBlockReader r(model);
  bool bias = false;
  int64_t window = 0;
  read_block(r, s, &bias, &window);
  r.at_least("vocab_size", s.vocab_size, 0);
  r.at_least("hidden_size", s.hidden_size, 1);
  r.at_least("intermediate_size", s.intermediate_size, 1);
  r.at_least("num_hidden_layers", s.num_hidden_layers, 1);
  r.at_least("num_attention_heads", s.num_attention_heads, 1);
  r.at_least("max_position_embeddings", s.max_position_embeddings, 1);
  if (s.num_key_value_heads == 0) s.num_key_value_heads = s.num_attention_heads;
  if (s.head_dim == 0 && s.num_attention_heads >= 1) {
    r.check(s.hidden_size % s.num_attention_heads == 0, "hidden_size",
            "must be divisible by num_attention_heads (", s.num_attention_heads,
            ") unless head_dim is given, got ", s.hidden_size);
    s.head_dim = s.hidden_size / s.num_attention_heads;
  }
  r.finish();
  apply_block(s, bias, window, window > 0);
  s.vocab_size = std::max(s.vocab_size, shard_vocab_size);
  ZT_CHECK(s.vocab_size >= 1, r.path("vocab_size"), " is 0 and the shard names no vocabulary");
  s.validate("config `" + model.name() + "` block");
  return s;
}

LlamaShape llama_shape_over_pretrained(const ProgramBlock& model, const LlamaShape& pretrained,
                                       const std::string& source) {
  LlamaShape s = pretrained;
  bool bias = false;
  int64_t window = 0;
  ProgramBlockReader r(model);
  read_block(r, s, &bias, &window);
  r.finish();
  apply_block(s, bias, window, model.has("sliding_window"));
  // Everything but the training switches must be what the weights were made with.
  LlamaShape cmp = s;
  cmp.activation_checkpointing = pretrained.activation_checkpointing;
  cmp.attention_dropout = pretrained.attention_dropout;
  cmp.loss_tile_tokens = pretrained.loss_tile_tokens;
  cmp.mlp_tile_tokens = pretrained.mlp_tile_tokens;
  cmp.moe.output_router_logits = pretrained.moe.output_router_logits;
  cmp.moe.router_aux_loss_coef = pretrained.moe.router_aux_loss_coef;
  cmp.moe.global_router_aux_loss = pretrained.moe.global_router_aux_loss;
  cmp.moe.capacity_factor = pretrained.moe.capacity_factor;
  cmp.moe.eval_capacity_factor = pretrained.moe.eval_capacity_factor;
  cmp.moe.min_capacity = pretrained.moe.min_capacity;
  cmp.moe.drop_policy = pretrained.moe.drop_policy;
  const auto& p = pretrained;
  const bool same =
      cmp.model_type == p.model_type && cmp.vocab_size == p.vocab_size &&
      cmp.hidden_size == p.hidden_size && cmp.intermediate_size == p.intermediate_size &&
      cmp.num_hidden_layers == p.num_hidden_layers &&
      cmp.num_attention_heads == p.num_attention_heads &&
      cmp.num_key_value_heads == p.num_key_value_heads && cmp.head_dim == p.head_dim &&
      cmp.max_position_embeddings == p.max_position_embeddings &&
      cmp.rms_norm_eps == p.rms_norm_eps && cmp.rope_theta == p.rope_theta &&
      cmp.rope_scaling.type == p.rope_scaling.type &&
      cmp.rope_scaling.factor == p.rope_scaling.factor &&
      cmp.rope_scaling.low_freq_factor == p.rope_scaling.low_freq_factor &&
      cmp.rope_scaling.high_freq_factor == p.rope_scaling.high_freq_factor &&
      cmp.rope_scaling.original_max_position_embeddings ==
          p.rope_scaling.original_max_position_embeddings &&
      cmp.tie_word_embeddings == p.tie_word_embeddings && cmp.qkv_bias == p.qkv_bias &&
      cmp.o_bias == p.o_bias && cmp.mlp_bias == p.mlp_bias &&
      cmp.layer_windows == p.layer_windows && cmp.qk_norm == p.qk_norm &&
      same_experts(cmp.moe, p.moe);
  if (!same) {
    std::string keys;
    for (const std::string& k : model.keys()) {
      if (!training_switch(k)) {
        keys += (keys.empty() ? "" : ", ") + model.name() + "." + k;
      }
    }
    ZT_THROW("config `", model.name(), "` block disagrees with ", source, " (", keys,
             "); with pretrained weights the shape is theirs: leave those keys out");
  }
  s.validate(source);
  return s;
}

}  // namespace zt::models
