#include "models/llama/llama_shape.h"

#include "base/error.h"

namespace zt::models {

void LlamaShape::validate(const std::string& source) const {
  ZT_CHECK(model_type == "llama" || model_type == "qwen2" || model_type == "mistral", source,
           ": model_type '", model_type, "' is not llama, qwen2 or mistral");
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

}  // namespace zt::models
