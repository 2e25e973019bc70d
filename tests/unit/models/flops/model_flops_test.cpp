// The FLOPs profiler (core/profile/flops_profiler.h) through the engine on the GPT and LLaMA
// examples: one optimizer step's counted model FLOPs against the hand formula
//   6 N per token (N = the weights of every matrix product, the head included)
//   + 12 L T d_attn per token (attention's QK^T and PV at full length, forward and backward),
// at stages 0 and 3, with and without activation checkpointing (whose recompute is counted apart,
// never as model work); and the report printed at profile_step.

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/engine.h"
#include "core/profile/flops_profiler.h"
#include "models/gpt/gpt_model.h"
#include "models/llama/llama_model.h"
#include "parallel/dist.h"

namespace zt::models {
namespace {

constexpr int64_t kBatch = 2, kSeq = 32;

struct Case {
  int stage;
  bool checkpointing;
};

std::string case_name(const testing::TestParamInfo<Case>& i) {
  return "Stage" + std::to_string(i.param.stage) + (i.param.checkpointing ? "Checkpointed" : "");
}

EngineOptions options(int stage, const std::vector<std::string>& units,
                      const std::string& report = "") {
  EngineOptions o;
  o.stage = stage;
  o.units = units;
  o.reduce_bucket_size = 5000;
  o.stage3_param_persistence_threshold = 0;
  o.flops_profiler.enabled = true;
  o.flops_profiler.profile_step = 1;
  o.flops_profiler.peak_tflops = 2.0;
  o.flops_profiler.micro_batch_size = kBatch;
  o.flops_profiler.output_file = report;
  return o;
}

std::shared_ptr<dist::Communicator> one_rank() {
  return dist::create_communicator(dist::CommOptions{}, dist::Env::from_map({}));
}

// Runs two optimizer steps; returns the second's counts.
template <typename Model>
profile::StepFlops train_two_steps(Engine& engine, Model& model, int64_t vocab) {
  for (int step = 0; step < 2; ++step) {
    torch::manual_seed(10 + step);
    const torch::Tensor ids = torch::randint(0, vocab, {kBatch, kSeq}, torch::kLong);
    const torch::Tensor loss =
        engine.forward([&] { return model->loss(model->forward(ids, {}), ids.roll(-1, 1)); });
    engine.backward(loss);
    engine.step();
  }
  return *engine.step_flops();
}

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class GptFlops : public testing::TestWithParam<Case> {};

TEST_P(GptFlops, StepCountsMatchTheHandFormula) {
  GptShape s;  // 2 layers, d 64, 2 heads, vocabulary 256
  s.max_seq_len = kSeq;
  s.activation_checkpointing = GetParam().checkpointing;
  torch::manual_seed(3);
  Gpt model(s);
  const std::string report = testing::TempDir() + "gpt_flops_" + std::to_string(GetParam().stage) +
                             (GetParam().checkpointing ? "c" : "") + "/profile.txt";
  Engine engine(model.ptr(), options(GetParam().stage, model->unit_names(), report), one_rank());
  const profile::StepFlops f = train_two_steps(engine, model, s.vocab_size);

  const double d = s.d_model, L = s.n_layer, V = s.vocab_size, T = kSeq;
  const double tokens = kBatch * T;
  const double n = L * 12 * d * d + V * d;  // qkv 3d^2, proj d^2, mlp 8d^2; the tied head
  const double hand = 6 * n * tokens + 12 * L * T * d * tokens;
  EXPECT_NEAR(f.flops.model() / hand, 1.0, 0.02) << f.flops.model() << " vs " << hand;
  EXPECT_NEAR(f.flops.backward / f.flops.forward, 2.0, 0.02);
  // The recompute is the blocks' forward again (plus the fused attention backward's QK^T).
  const double block_forward = L * (24 * d * d + 4 * T * d) * tokens;
  const double attention_recompute = L * 2 * T * d * tokens;
  EXPECT_NEAR(f.flops.recompute,
              attention_recompute + (GetParam().checkpointing ? block_forward : 0.0),
              0.02 * block_forward);
  EXPECT_EQ(f.step, 2);
  EXPECT_GT(f.seconds, 0);
  EXPECT_DOUBLE_EQ(f.mfu(), f.tflops() / 2.0);
  EXPECT_GT(f.mfu(), 0);

  // The report of step 1: the summary, each block's MACs (a quarter of the forward matmuls per
  // block at L = 2 minus the head), the tree.
  const std::string text = read(report);
  ASSERT_NE(text.find("Profile summary at step 1"), std::string::npos) << text;
  EXPECT_NE(text.find("params of model:"), std::string::npos);
  EXPECT_NE(text.find("depth 1:"), std::string::npos) << text;
  EXPECT_NE(text.find("(blocks): ModuleList"), std::string::npos) << text;
  EXPECT_NE(text.find("(0): GptBlock"), std::string::npos) << text;
  EXPECT_NE(text.find("(qkv): Linear"), std::string::npos) << text;
  const double block_macs = (24 * d * d + 4 * T * d) * tokens / 2;
  std::ostringstream macs;
  macs << std::fixed << std::setprecision(2) << block_macs / 1e6 << " MMACs";
  const size_t row = text.find("(0): GptBlock(");
  ASSERT_NE(row, std::string::npos) << text;
  EXPECT_NE(text.substr(row, text.find('\n', row) - row).find(macs.str()), std::string::npos)
      << "block row should show " << macs.str() << ":\n"
      << text.substr(row, text.find('\n', row) - row);
}

INSTANTIATE_TEST_SUITE_P(Stages, GptFlops,
                         testing::Values(Case{0, false}, Case{3, false}, Case{0, true},
                                         Case{3, true}),
                         case_name);

class LlamaFlops : public testing::TestWithParam<Case> {};

TEST_P(LlamaFlops, StepCountsMatchTheHandFormula) {
  LlamaShape s;
  s.vocab_size = 300;
  s.hidden_size = 64;
  s.intermediate_size = 128;
  s.num_hidden_layers = 2;
  s.num_attention_heads = 4;
  s.num_key_value_heads = 2;  // grouped-query attention
  s.head_dim = 16;
  s.max_position_embeddings = kSeq;
  s.activation_checkpointing = GetParam().checkpointing;
  torch::manual_seed(5);
  LlamaForCausalLM model(s);
  Engine engine(model.ptr(), options(GetParam().stage, model->unit_names()), one_rank());
  const profile::StepFlops f = train_two_steps(engine, model, s.vocab_size);

  const double d = s.hidden_size, L = s.num_hidden_layers, V = s.vocab_size, T = kSeq;
  const double q = s.num_attention_heads * s.head_dim, kv = s.num_key_value_heads * s.head_dim;
  const double tokens = kBatch * T;
  const double n = L * (d * q + 2 * d * kv + q * d + 3 * d * s.intermediate_size) + V * d;
  const double hand = 6 * n * tokens + 12 * L * T * q * tokens;
  EXPECT_NEAR(f.flops.model() / hand, 1.0, 0.02) << f.flops.model() << " vs " << hand;
  if (GetParam().checkpointing) {
    EXPECT_GT(f.flops.recompute, L * (2 * (d * q + 2 * d * kv + q * d)) * tokens);
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, LlamaFlops,
                         testing::Values(Case{0, false}, Case{3, false}, Case{3, true}), case_name);

// Evaluation forwards (no grad) between two steps add nothing to the second; without the
// block the engine counts nothing.
TEST(ModelFlops, EvaluationIsNotCountedAndDisabledCountsNothing) {
  GptShape s;
  s.max_seq_len = kSeq;
  Gpt model(s);
  Engine engine(model.ptr(), options(0, model->unit_names()), one_rank());
  const torch::Tensor ids = torch::randint(0, s.vocab_size, {kBatch, kSeq}, torch::kLong);
  auto train_step = [&] {
    engine.backward(engine.forward([&] { return model->loss(model->forward(ids, {}), ids); }));
    engine.step();
    return engine.step_flops()->flops;
  };
  const profile::FlopTotals first = train_step();
  {
    torch::NoGradGuard no_grad;
    engine.eval();
    engine.forward([&] { return model->forward(ids, {}); });
    engine.train();
  }
  const profile::FlopTotals second = train_step();
  EXPECT_GT(first.model(), 0);
  EXPECT_DOUBLE_EQ(second.model(), first.model());
  EXPECT_DOUBLE_EQ(second.other, first.other);

  Gpt other(s);
  EngineOptions o = options(0, other->unit_names());
  o.flops_profiler.enabled = false;
  Engine off(other.ptr(), o, one_rank());
  EXPECT_EQ(off.step_flops(), nullptr);
}

// A disabled profiler registers nothing with ATen: the only cost left is a null check per
// forward, backward and step, and a scan of eight atomic pointers per unit call.
TEST(ModelFlops, DisabledRegistersNoCallback) {
  GptShape s;
  Gpt model(s);
  EngineOptions o = options(3, model->unit_names());
  o.flops_profiler.enabled = false;
  Engine engine(model.ptr(), o, one_rank());
  EXPECT_EQ(profile::FlopCounter::active(), nullptr);
  EXPECT_FALSE(at::hasGlobalCallbacks());
}

}  // namespace
}  // namespace zt::models
