// Expert capacity (models/llama/moe_capacity.h) against DeepSpeed's own top-k gating: the cases
// in tests/data/moe_capacity/cases.safetensors were written by running deepspeed.moe.sharded_moe.
// topkgating (DeepSpeed 0.19.8) on seeded router logits skewed toward one expert
// (tests/data/moe_capacity/make_cases.py): the same capacity, the same kept choices, the same
// renormalised weights (fp32 rounding), under both drop policies. Then the layer: a routed layer
// with a capacity drops exactly those choices, and without one every token reaches its experts.

#include "models/llama/moe_capacity.h"

#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/llama/llama_moe.h"
#include "weights/safetensors_reader.h"

namespace zt::models {
namespace {

TEST(MoeCapacity, KeepsWhatDeepSpeedsTopKGatingKeeps) {
  SafetensorsReader cases(ZT_MOE_CAPACITY_CASES);
  int count = 0;
  for (int c = 0;; ++c) {
    const std::string prefix = std::to_string(c) + ".";
    bool found = false;
    for (const auto& e : cases.entries()) found = found || e.name == prefix + "meta";
    if (!found) break;
    ++count;
    const torch::Tensor meta = cases.read(prefix + "meta");
    const int64_t k = meta[0].item<int64_t>(), min_cap = meta[2].item<int64_t>();
    const double factor = static_cast<double>(meta[1].item<int64_t>()) / 100.0;
    const std::string policy = meta[3].item<int64_t>() == 0 ? "probs" : "position";
    const torch::Tensor logits = cases.read(prefix + "logits");
    const torch::Tensor want = cases.read(prefix + "gates");
    const int64_t n = logits.size(0), e = logits.size(1);
    const int64_t capacity = expert_capacity(n, e, k, factor, min_cap);
    EXPECT_EQ(capacity, meta[4].item<int64_t>()) << "case " << c;
    const torch::Tensor probs = torch::softmax(logits, -1);
    const torch::Tensor index = std::get<1>(torch::topk(probs, k, -1));
    const Routed r = limit_capacity(probs, index, capacity, policy);
    // As DeepSpeed's (N, E) combine weights: each kept choice's weight at its expert.
    const torch::Tensor kept = r.index.lt(e);
    const torch::Tensor got =
        torch::zeros({n, e + 1}).scatter(1, r.index, r.weight).narrow(1, 0, e);
    EXPECT_TRUE(torch::equal(got.gt(0), want.gt(0)))
        << "case " << c << " (" << policy << "): the kept choices differ";
    EXPECT_TRUE(torch::allclose(got, want, 1e-6, 1e-7))
        << "case " << c << ": weights differ by " << (got - want).abs().max().item<double>();
    EXPECT_TRUE(torch::equal(r.weight.eq(0), kept.logical_not())) << "case " << c;
    // Something was dropped where the capacity is below the demand, and no expert holds more
    // choices than the capacity.
    const torch::Tensor per_expert =
        torch::bincount(r.index.reshape({-1}), {}, e + 1).narrow(0, 0, e);
    EXPECT_LE(per_expert.max().item<int64_t>(), capacity) << "case " << c;
    if (capacity * e < n * k) {
      EXPECT_LT(kept.sum().item<int64_t>(), n * k) << "case " << c;
    }
  }
  EXPECT_EQ(count, 7);
}

// A Mixtral layer with a capacity sends each expert at most that many of its rows, drops the
// choices limit_capacity drops, and in evaluation takes eval_capacity_factor; without a capacity
// every choice is routed.
TEST(MoeCapacity, TheLayerRoutesOnlyTheKeptChoices) {
  LlamaShape s;
  s.model_type = "mixtral";
  s.hidden_size = 16;
  s.moe.num_experts = 4;
  s.moe.num_experts_per_tok = 2;
  s.moe.intermediate_size = 8;
  s.moe.fp32_expert_weights = true;
  torch::manual_seed(3);
  auto run = [&](double factor, double eval_factor, bool training) {
    LlamaShape t = s;
    t.moe.capacity_factor = factor;
    t.moe.eval_capacity_factor = eval_factor;
    t.moe.min_capacity = 1;
    torch::manual_seed(5);
    SparseMoeBlock block(t, nullptr);
    for (auto& p : block->parameters()) torch::nn::init::normal_(p, 0.0, 0.5);
    block->train(training);
    torch::manual_seed(6);
    const torch::Tensor x = torch::randn({2, 10, 16});
    block->forward(x);
    return block->experts->tokens_per_expert().clone();
  };
  const torch::Tensor all = run(0, -1, true);
  EXPECT_EQ(all.sum().item<int64_t>(), 2 * 10 * 2);
  // 20 tokens, 4 experts, k 2, factor 0.5: capacity ceil(20 / 4 * 0.5 * 2) = 5.
  const torch::Tensor capped = run(0.5, -1, true);
  EXPECT_LE(capped.max().item<int64_t>(), 5) << capped;
  EXPECT_LT(capped.sum().item<int64_t>(), 40) << capped;
  EXPECT_TRUE(torch::equal(capped, torch::minimum(all, torch::full_like(all, 5)))) << capped;
  // Evaluation with eval_capacity_factor 0.25: capacity 3; without it, the training factor.
  EXPECT_LE(run(0.5, 0.25, false).max().item<int64_t>(), 3);
  EXPECT_TRUE(torch::equal(run(0.5, -1, false), capped));
}

}  // namespace
}  // namespace zt::models
