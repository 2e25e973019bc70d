#pragma once
// The shape of a LLaMA-family decoder (llama_model.h): what a Hugging Face config.json of
// model_type llama, qwen2 or mistral says, in that file's own key names. The three share one
// architecture (pre-RMSNorm layers, rotary positions, grouped-query attention, a SwiGLU MLP) and
// differ only in what LlamaShape records: which projections carry biases and which layers attend
// through a sliding window.

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

struct LlamaShape {
  std::string model_type = "llama";  // llama | qwen2 | mistral
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

  int64_t window(int64_t layer) const {
    return layer < static_cast<int64_t>(layer_windows.size()) ? layer_windows[layer] : 0;
  }
  // Throws one zt::Error naming `source` for an inconsistent shape (heads not dividing, ...).
  void validate(const std::string& source) const;
};

}  // namespace zt::models
