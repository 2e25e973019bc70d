// zt::launch / zt::initialize in one process (no launcher: world size 1) and BatchStream against
// the config's `data` block.

#include "train/initialize.h"

#include <fstream>
#include <string>
#include <unistd.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/error.h"
#include "data/token_shard_writer.h"

namespace zt {
namespace {

// Writes `count` samples of lengths 1..count, token ids 1..99, with `pad_id` in the meta (none
// when empty) and returns the path.
std::string write_ramp(const std::string& name, int count, const std::string& pad_id) {
  data::TokenShardWriter w({100, 0, {}});
  for (int n = 1; n <= count; ++n) {
    std::vector<int> tokens;
    for (int i = 0; i < n; ++i) tokens.push_back(1 + (n * 7 + i) % 99);
    w.add(tokens);
  }
  if (!pad_id.empty()) w.set_meta("pad_id", pad_id);
  // Per process: ctest runs this binary's tests in parallel processes.
  const std::string p =
      ::testing::TempDir() + "zt_initialize_" + name + "_" + std::to_string(getpid()) + ".ztt";
  w.write(p);
  return p;
}

// 40 samples of lengths 1..40, token ids 1..99, pad id 0.
std::shared_ptr<const data::TokenDataset> ramp_shard() {
  static const std::string path = write_ramp("ramp", 40, "0");
  return std::make_shared<const data::TokenDataset>(path);
}

std::string write_config(const std::string& name, const std::string& yaml) {
  // Per process: ctest runs this binary's tests in parallel processes.
  const std::string path =
      ::testing::TempDir() + "zt_initialize_" + name + "_" + std::to_string(getpid()) + ".yaml";
  std::ofstream(path) << yaml;
  return path;
}

Launch launch_with(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return launch(LaunchOptions{write_config("cfg", yaml), overrides, {}});
}

struct TwoLayerImpl : torch::nn::Module {
  TwoLayerImpl() {
    embed = register_module("embed", torch::nn::Embedding(100, 8));
    fc = register_module("fc", torch::nn::Linear(8, 1));
  }
  torch::Tensor loss(const data::Batch& b) {
    torch::Tensor h = embed->forward(b.input_ids).mean(1);  // (B, 8)
    return fc->forward(h).pow(2).mean();
  }
  torch::nn::Embedding embed{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(TwoLayer);

const char* kConfig = R"(
train_micro_batch_size_per_gpu: 4
seed: 7
optimizer: {type: AdamW, params: {lr: 0.1}}
zero_optimization: {stage: 2}
data: {max_length: 16, max_tokens: 64, pad_to_multiple: 4}
communication: {backend: gloo}
)";

TEST(BatchStream, TokenBudgetBatchesFromTheDataBlock) {
  Launch l = launch_with(kConfig);
  BatchStream s(ramp_shard(), l.config, *l.comm, {});
  EXPECT_NE(dynamic_cast<const data::LengthBucketedSampler*>(&s.sampler()), nullptr);
  const int64_t n = s.num_batches();
  ASSERT_GT(n, 0);
  for (int64_t i = 0; i < n; ++i) {
    std::optional<data::Batch> b = s.next();
    ASSERT_TRUE(b);
    const int64_t t = b->input_ids.size(1);
    EXPECT_LE(t, 16);
    EXPECT_EQ(t % 4, 0);
    EXPECT_LE(b->num_padded_tokens, 64);
  }
  // Training: the next epoch starts by itself.
  EXPECT_TRUE(s.next());
  EXPECT_EQ(s.epoch(), 1);
}

TEST(BatchStream, EvaluationEndsWithItsEpochAndCausalShiftKeepsTheModelLength) {
  Launch l = launch_with(kConfig, {"data.bucketing=false"});
  BatchStreamOptions o;
  o.training = false;
  o.max_length = 8;  // the model's, below data.max_length
  o.causal_lm_shift = true;
  BatchStream s(ramp_shard(), l.config, *l.comm, o);
  // Evaluation is length-bucketed whatever data.bucketing says.
  EXPECT_NE(dynamic_cast<const data::LengthBucketedSampler*>(&s.sampler()), nullptr);
  int64_t count = 0;
  while (auto b = s.next()) {
    EXPECT_LE(b->input_ids.size(1), 8);
    EXPECT_EQ(b->labels.size(1), b->input_ids.size(1));
    ++count;
  }
  EXPECT_EQ(count, s.num_batches());
  s.restart();
  EXPECT_TRUE(s.next());
}

TEST(BatchStream, SampleCountBatchesAndRandomOrderWhenAsked) {
  Launch l = launch_with(kConfig, {"data.max_tokens=0"});
  BatchStreamOptions o;
  o.bucketing = false;
  BatchStream s(ramp_shard(), l.config, *l.comm, o);
  EXPECT_NE(dynamic_cast<const data::RandomBatchSampler*>(&s.sampler()), nullptr);
  EXPECT_EQ(s.next()->batch_size(), 4);  // train_micro_batch_size_per_gpu
}

TEST(BatchStream, PadsWithTheShardsPadId) {
  Launch l = launch_with(kConfig);
  auto shard = std::make_shared<const data::TokenDataset>(write_ramp("pad3", 40, "3"));
  BatchStream s(shard, l.config, *l.comm, {});
  int64_t pads = 0;
  for (int64_t i = 0; i < s.num_batches(); ++i) {
    std::optional<data::Batch> b = s.next();
    ASSERT_TRUE(b);
    const torch::Tensor at_pads = b->input_ids.masked_select(b->attention_mask == 0);
    EXPECT_TRUE(torch::all(at_pads == 3).item<bool>()) << at_pads;
    pads += at_pads.numel();
  }
  // Lengths 1..40 in batches rounded up to multiples of 4 leave pads to look at.
  EXPECT_GT(pads, 0);
}

TEST(BatchStream, ShardWithoutPadIdIsAnErrorNamingTheFile) {
  Launch l = launch_with(kConfig);
  const std::string path = write_ramp("nopad", 8, "");
  try {
    BatchStream s(std::make_shared<const data::TokenDataset>(path), l.config, *l.comm, {});
    FAIL() << "built a batch stream from a shard without pad_id";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(path), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("no pad_id"), std::string::npos) << e.message();
  }
}

TEST(Initialize, FreezesBuildsTheEngineAndTheLoaderFromTheConfig) {
  Launch l = launch_with(kConfig, {"freeze=[embed.*]"});
  EXPECT_EQ(l.comm->size(), 1);
  TwoLayer model;
  Training t = initialize(std::move(l), model.ptr(), {.train_data = ramp_shard()});
  EXPECT_EQ(t.frozen, (std::vector<std::string>{"embed.weight"}));
  EXPECT_FALSE(model->embed->weight.requires_grad());
  ASSERT_TRUE(t.engine && t.loader);
  const torch::Tensor embed = model->embed->weight.detach().clone();
  const torch::Tensor fc = model->fc->weight.detach().clone();
  data::Batch b = *t.loader->next();
  torch::Tensor loss = t.engine->forward([&] { return model->loss(b); });
  t.engine->backward(loss);
  t.engine->step();
  EXPECT_DOUBLE_EQ(t.engine->get_lr(), 0.1);
  EXPECT_TRUE(torch::equal(model->embed->weight, embed));
  EXPECT_FALSE(torch::equal(model->fc->weight, fc));
}

TEST(Initialize, LaunchSeedsTorchSoModelsBuiltAfterItAgree) {
  Launch a = launch_with(kConfig);
  TwoLayer first;
  Launch b = launch_with(kConfig);
  TwoLayer second;
  EXPECT_TRUE(torch::equal(first->fc->weight, second->fc->weight));
  Launch c = launch_with(kConfig, {"seed=8"});
  TwoLayer third;
  EXPECT_FALSE(torch::equal(first->fc->weight, third->fc->weight));
}

TEST(Initialize, FreezePatternMatchingNothingIsAnError) {
  TwoLayer model;
  EXPECT_THROW(initialize(launch_with(kConfig, {"freeze=[wte.*]"}), model.ptr()), Error);
}

}  // namespace
}  // namespace zt
