// The GPT example's `model` block (gpt_config.h): the program reads and checks its own block,
// handed over unread by the config (core/config/program_block.h), with the framework's strictness.

#include "examples/gpt/gpt_config.h"

#include <string>

#include <gtest/gtest.h>

#include "core/base/error.h"
#include "core/config/config.h"

namespace zt::examples {
namespace {

ProgramBlock model_block(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  Config c = parse_config("train_batch_size: 8\n" + yaml, ConfigFormat::kYaml, overrides, 1);
  return c.program_block("model");
}

// The error message of reading `yaml`'s model block, or "" when it is accepted.
std::string error_of(const std::string& yaml, int64_t shard_vocab = 100) {
  try {
    gpt_shape_from_config(model_block(yaml), shard_vocab);
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

TEST(GptConfig, ReadsTheModelBlockWithDefaults) {
  GptShape s = gpt_shape_from_config(
      model_block("model: {n_layer: 3, d_model: 96, n_head: 4}", {"model.dropout=0"}), 300);
  EXPECT_EQ(s.n_layer, 3);
  EXPECT_EQ(s.n_head, 4);
  EXPECT_EQ(s.d_model, 96);
  EXPECT_EQ(s.vocab_size, 50257);  // the default, above the shard's
  EXPECT_EQ(s.max_seq_len, 1024);
  EXPECT_EQ(s.dropout, 0.0);
  EXPECT_FALSE(s.activation_checkpointing);
}

TEST(GptConfig, VocabSizeZeroMeansFromTheData) {
  EXPECT_EQ(gpt_shape_from_config(model_block("model: {vocab_size: 0}"), 300).vocab_size, 300);
  EXPECT_NE(error_of("model: {vocab_size: 0}", 0).find("model.vocab_size is 0"), std::string::npos);
}

TEST(GptConfig, BadBlocksAreRejectedNamingTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {"model: {d_model: 100, n_head: 3}", "model.d_model: must be divisible by model.n_head (3)"},
      {"model: {dropout: 1.0}", "model.dropout: must be in [0, 1)"},
      {"model: {vocab_size: -1}", "model.vocab_size: must be >= 0"},
      {"model: {n_layer: 0}", "model.n_layer: must be >= 1, got 0"},
      {"model: {n_layer: 2.5}", "model.n_layer: expected an integer, got 2.5"},
      {"model: {activation_checkpointing: 1}",
       "model.activation_checkpointing: expected a boolean"},
      {"model: {n_layers: 2}", "model.n_layers: unknown key; did you mean 'n_layer'?"},
      {"data: {max_length: 8}", "the config has no `model` block"},
  };
  for (const auto& [yaml, fragment] : cases) {
    SCOPED_TRACE(yaml);
    EXPECT_NE(error_of(yaml).find(fragment), std::string::npos) << error_of(yaml);
  }
  // Every problem of the block in one message.
  const std::string both = error_of("model: {dropout: 1.0, n_head: 0}");
  EXPECT_NE(both.find("2 errors"), std::string::npos) << both;
}

}  // namespace
}  // namespace zt::examples
