#pragma once
// The GPT example's `model` block: its shape, read from the config by the program itself
// (zt::ProgramBlock, core/config/program_block.h), the framework knowing none of its keys.
//
//   model: {n_layer: 4, n_head: 4, d_model: 128, vocab_size: 0, max_seq_len: 64, dropout: 0.0,
//           activation_checkpointing: false, activation: gelu, loss_tile_tokens: 0}

#include <cstdint>

#include "core/config/config.h"
#include "core/config/program_block.h"
#include "models/gpt/gpt_block.h"

namespace zt::models {

// The config's `model` block, the GPT example's own (the framework hands it over unread,
// core/config/program_block.h), with these keys and defaults:
//   n_layer: 12, n_head: 12, d_model: 768, vocab_size: 50257, max_seq_len: 1024, dropout: 0.1,
//   activation_checkpointing: false, activation: gelu, loss_tile_tokens: 0
// (loss_tile_tokens > 0: the head and the loss that many positions at a time, GptShape;
// activation: gelu = exact GELU, gelu_new = GPT-2's tanh approximation; set gelu_new to match
// a Hugging Face GPT-2 exactly, hf_gpt2.h.)
// vocab_size is raised to the shard's vocabulary when smaller (0 = take the shard's). Throws one
// zt::Error listing every problem (unknown keys, bad types, ranges).
GptShape gpt_shape_from_config(const ProgramBlock& model, int64_t shard_vocab_size);
// What "auto" keys resolve from in the GPT examples: the scheduler's total steps, and the
// hidden size from the model block (model.d_model) for the ZeRO bucket sizes.
ProgramValues gpt_program_values(int64_t total_steps);

}  // namespace zt::models
