#include "models/gpt/gpt_config.h"

#include <algorithm>

#include "base/error.h"

namespace zt::models {

GptShape gpt_shape_from_config(const ProgramBlock& model, int64_t shard_vocab_size) {
  GptShape s;
  s.n_layer = 12;
  s.n_head = 12;
  s.d_model = 768;
  s.vocab_size = 50257;
  s.max_seq_len = 1024;
  s.dropout = 0.1;
  s.activation_checkpointing = false;
  ZT_CHECK(!model.empty(), "the config has no `", model.name(), "` block (the GPT's shape)");
  ProgramBlockReader r(model);
  r.field("n_layer", s.n_layer);
  r.field("n_head", s.n_head);
  r.field("d_model", s.d_model);
  r.field("vocab_size", s.vocab_size);
  r.field("max_seq_len", s.max_seq_len);
  r.field("dropout", s.dropout);
  r.field("activation_checkpointing", s.activation_checkpointing);
  r.field("activation", s.activation);
  r.field("loss_tile_tokens", s.loss_tile_tokens);
  r.at_least("n_layer", s.n_layer, 1);
  r.at_least("n_head", s.n_head, 1);
  r.at_least("d_model", s.d_model, 1);
  r.at_least("max_seq_len", s.max_seq_len, 1);
  r.at_least("loss_tile_tokens", s.loss_tile_tokens, 0);
  // 0: the program takes the vocabulary of its data (the token shard's tokenizer).
  r.at_least("vocab_size", s.vocab_size, 0);
  r.check(s.n_head < 1 || s.d_model % s.n_head == 0, "d_model", "must be divisible by ",
          r.path("n_head"), " (", s.n_head, "), got ", s.d_model);
  r.check(s.dropout >= 0 && s.dropout < 1, "dropout", "must be in [0, 1), got ", s.dropout);
  r.check(s.activation == "gelu" || s.activation == "gelu_new", "activation",
          "must be gelu (exact) or gelu_new (GPT-2's tanh approximation), got '", s.activation,
          "'");
  r.finish();
  s.vocab_size = std::max(s.vocab_size, shard_vocab_size);
  ZT_CHECK(s.vocab_size >= 1, r.path("vocab_size"), " is 0 and the shard names no vocabulary");
  return s;
}

ProgramValues gpt_program_values(int64_t total_steps) {
  ProgramValues p;
  p.total_steps = total_steps;
  p.hidden_size_key = "model.d_model";
  return p;
}

}  // namespace zt::models
