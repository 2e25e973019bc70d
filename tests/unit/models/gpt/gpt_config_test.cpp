// The GPT example's `model` block (gpt_config.h): the program reads and checks its own block,
// handed over unread by the config (core/config/program_block.h), with the framework's strictness.

#include "models/gpt/gpt_config.h"

#include <cmath>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/error.h"
#include "core/config/config.h"
#include "models/gpt/gpt_model.h"

namespace zt::models {
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
  EXPECT_EQ(s.activation, "gelu");
  EXPECT_EQ(gpt_shape_from_config(model_block("model: {activation: gelu_new}"), 1).activation,
            "gelu_new");
  EXPECT_EQ(s.loss_tile_tokens, 0);
  EXPECT_EQ(
      gpt_shape_from_config(model_block("model: {loss_tile_tokens: 256}"), 1).loss_tile_tokens,
      256);
}

// loss_tile_tokens: the same mean loss and gradients as the whole logits, with padded positions
// (-100) and a tile that does not divide the sequence; the loss is NaN without any token, as the
// untiled mean is.
TEST(GptConfig, TiledLossIsTheWholeLogitsLoss) {
  GptShape s;
  s.n_layer = 2;
  s.d_model = 16;
  s.n_head = 2;
  s.vocab_size = 37;
  s.max_seq_len = 16;
  torch::manual_seed(0);
  Gpt whole(s);
  s.loss_tile_tokens = 3;
  Gpt tiled(s);
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < whole->parameters().size(); ++i) {
      tiled->parameters()[i].copy_(whole->parameters()[i]);
    }
  }
  const at::Tensor ids = torch::randint(37, {2, 7});
  const at::Tensor mask = torch::tensor({{1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 0, 0, 0}});
  at::Tensor labels = ids.roll(-1, 1);
  labels.masked_fill_(mask.roll(-1, 1).eq(0), -100);
  labels.select(1, 6).fill_(-100);
  const at::Tensor a = whole->causal_lm_loss(ids, mask, labels);
  const at::Tensor b = tiled->causal_lm_loss(ids, mask, labels);
  EXPECT_NEAR(a.item<double>(), GptImpl::loss(whole->forward(ids, mask), labels).item<double>(),
              0.0);
  EXPECT_NEAR(a.item<double>(), b.item<double>(), 1e-6);
  a.backward();
  b.backward();
  const auto want = whole->named_parameters(), got = tiled->named_parameters();
  for (const auto& p : want) {
    SCOPED_TRACE(p.key());
    EXPECT_TRUE(torch::allclose(got[p.key()].grad(), p.value().grad(), 1e-5, 1e-7));
  }
  EXPECT_TRUE(
      std::isnan(tiled->causal_lm_loss(ids, mask, torch::full({2, 7}, -100L)).item<double>()));
}

// gelu_new is GPT-2's tanh approximation: the MLP computes it, and it differs from exact GELU.
TEST(GptConfig, GeluNewIsTheTanhApproximation) {
  GptShape s;
  s.n_layer = 1;
  s.d_model = 8;
  s.n_head = 2;
  s.vocab_size = 11;
  torch::manual_seed(0);
  GptBlock exact(s);
  s.activation = "gelu_new";
  GptBlock tanh_form(s);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < exact->parameters().size(); ++i) {
    tanh_form->parameters()[i].copy_(exact->parameters()[i] * 3);
    exact->parameters()[i].mul_(3);
  }
  at::Tensor x = torch::randn({1, 3, 8});
  at::Tensor a = exact->forward(x, {}), b = tanh_form->forward(x, {});
  // The block by hand, with GPT-2's gelu_new written out.
  at::Tensor h = x + tanh_form->attn->forward(tanh_form->ln1->forward(x), {});
  at::Tensor u = tanh_form->fc->forward(tanh_form->ln2->forward(h));
  at::Tensor g =
      0.5 * u *
      (1 + torch::tanh(std::sqrt(2.0 / 3.14159265358979323846) * (u + 0.044715 * u.pow(3))));
  at::Tensor expected = h + tanh_form->out->forward(g);
  EXPECT_TRUE(torch::allclose(b, expected, 1e-4, 1e-5));
  // Weights x3 put the MLP's inputs where the two forms differ (not where both are ReLU-like).
  EXPECT_GT((a - b).abs().max().item<double>(), 1e-5);
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
      {"model: {activation: relu}", "model.activation: must be gelu (exact) or gelu_new"},
      {"model: {loss_tile_tokens: -1}", "model.loss_tile_tokens: must be >= 0"},
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
}  // namespace zt::models
