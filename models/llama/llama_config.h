#pragma once
// The LLaMA example's `model` block: the shape in Hugging Face config.json's key names
// (llama_shape.h), read by the program itself (core/config/program_block.h).
//
//   model: {model_type: llama, vocab_size: 0, hidden_size: 256, intermediate_size: 688,
//           num_hidden_layers: 4, num_attention_heads: 8, num_key_value_heads: 2,
//           max_position_embeddings: 512, rope_theta: 10000, tie_word_embeddings: false,
//           activation_checkpointing: true}
//
// Keys and defaults (transformers' LlamaConfig()): model_type llama, vocab_size 32000,
// hidden_size 4096, intermediate_size 11008, num_hidden_layers 32, num_attention_heads 32,
// num_key_value_heads (= heads), head_dim (= hidden_size / heads), max_position_embeddings 2048,
// rms_norm_eps 1e-6, rope_theta 10000, rope_type default, rope_factor 1,
// rope_low_freq_factor 1, rope_high_freq_factor 4, rope_original_max_position_embeddings 0,
// tie_word_embeddings false, attention_bias false (Qwen2: its q/k/v biases regardless),
// mlp_bias false, attention_dropout 0, sliding_window 0 (none; > 0: every layer),
// activation_checkpointing false, loss_tile_tokens 0 (ours: the head and loss a tile of positions
// at a time, models/tiled_loss.h), mlp_tile_tokens 0 (ours: each MLP a tile of positions at a
// time, models/tiled_mlp.h). vocab_size 0 takes the shard's vocabulary.
//
// Mixtures of experts (llama_shape.h MoeShape), in transformers' key names: model_type mixtral
// (num_local_experts 8, num_experts_per_tok 2, each expert intermediate_size wide, every layer
// routed), qwen2_moe (num_experts 8 here, num_experts_per_tok 2, moe_intermediate_size
// (= intermediate_size), shared_expert_intermediate_size 0, norm_topk_prob false,
// decoder_sparse_step 1, mlp_only_layers []) and qwen3_moe (the same without the shared expert,
// with q/k norms); for each output_router_logits false, router_aux_loss_coef 0.001 and ours,
// global_router_aux_loss false (models/load_balancing_loss.h).

#include <cstdint>

#include "core/config/program_block.h"
#include "models/llama/llama_shape.h"

namespace zt::models {

// The shape the block describes. Throws one zt::Error listing every problem.
LlamaShape llama_shape_from_config(const ProgramBlock& model, int64_t shard_vocab_size);

// The shape of a pretrained directory (`pretrained`, from `source`) with the block's
// activation_checkpointing, attention_dropout, loss_tile_tokens and mlp_tile_tokens; any other key
// the block sets must equal the pretrained value (an error naming both otherwise), so a config
// cannot silently disagree with the weights.
LlamaShape llama_shape_over_pretrained(const ProgramBlock& model, const LlamaShape& pretrained,
                                       const std::string& source);

}  // namespace zt::models
