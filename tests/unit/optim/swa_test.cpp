// Stochastic weight averaging (optim/swa.h) against a plain average of master snapshots: AdamW
// and SGD shards with padding, averaging windows from torchcontrib's rule (t > swa_start,
// t % swa_freq == 0), and a state_dict round trip in the middle of the window.
#include "optim/swa.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/error.h"

namespace {

using zt::optim::GroupRange;
using zt::optim::OptimizerSpec;
using zt::optim::SwaShardOptimizer;

constexpr int64_t kNumel = 203;
constexpr int kSwaSteps = 12;

std::vector<GroupRange> groups() {
  GroupRange a{3, 100, {}}, b{110, 200, {}};
  a.hyper.lr = b.hyper.lr = 0.05;
  b.hyper.weight_decay = 0.1;
  return {a, b};
}

OptimizerSpec spec(const std::string& type, int64_t start, int64_t freq) {
  OptimizerSpec s;
  s.type = zt::optim::optimizer_kind(type);
  s.swa = {true, start, freq};
  return s;
}

// Runs kSwaSteps steps of random gradients; returns the snapshots of master after each step.
std::vector<at::Tensor> run(zt::optim::ShardOptimizer& opt, at::Tensor& master, int from, int to) {
  std::vector<at::Tensor> snaps;
  for (int t = from; t <= to; ++t) {
    torch::manual_seed(100 + t);
    at::Tensor grad = torch::randn({kNumel});
    opt.step(master, grad, groups());
    snaps.push_back(master.clone());
  }
  return snaps;
}

at::Tensor plain_average(const std::vector<at::Tensor>& snaps, int64_t start, int64_t freq) {
  at::Tensor sum = torch::zeros({kNumel}, torch::kDouble);
  int64_t n = 0;
  for (int64_t t = 1; t <= static_cast<int64_t>(snaps.size()); ++t) {
    if (t > start && t % freq == 0) {
      sum += snaps[t - 1].to(torch::kDouble);
      ++n;
    }
  }
  return (sum / static_cast<double>(n)).to(torch::kFloat);
}

class SwaTest : public ::testing::TestWithParam<std::tuple<std::string, int64_t, int64_t>> {};

TEST_P(SwaTest, EqualsPlainAverageOfSnapshots) {
  const auto& [type, start, freq] = GetParam();
  auto opt = zt::optim::make_shard_optimizer(spec(type, start, freq));
  ASSERT_NE(dynamic_cast<SwaShardOptimizer*>(opt.get()), nullptr);
  EXPECT_EQ(opt->name(), type);
  torch::manual_seed(1);
  at::Tensor master = torch::randn({kNumel});
  const at::Tensor initial = master.clone();
  std::vector<at::Tensor> snaps = run(*opt, master, 1, kSwaSteps);
  const auto& swa = dynamic_cast<SwaShardOptimizer&>(*opt);
  const at::Tensor expected = plain_average(snaps, start, freq);
  EXPECT_TRUE(torch::allclose(swa.average(), expected, 1e-6, 1e-6))
      << (swa.average() - expected).abs().max().item<float>();
  int64_t n = 0;
  for (int64_t t = 1; t <= kSwaSteps; ++t) n += t > start && t % freq == 0;
  EXPECT_EQ(swa.averaged_steps(), n);
  // Not the last master: the average really mixes several steps.
  EXPECT_GT((swa.average() - master).abs().max().item<float>(), 1e-4);
  // Padding is never stepped, so it stays what master holds there.
  EXPECT_TRUE(swa.average().narrow(0, 0, 3).equal(initial.narrow(0, 0, 3)));
  // Checkpoint contents: laid out like master, with the count.
  auto state = opt->state_dict();
  ASSERT_TRUE(state.count("swa_model") && state.count("swa_n"));
  EXPECT_EQ(state["swa_model"].numel(), kNumel);
  EXPECT_EQ(state["swa_n"].item<int64_t>(), n);
}

INSTANTIATE_TEST_SUITE_P(Windows, SwaTest,
                         ::testing::Values(std::make_tuple("AdamW", 8, 1),
                                           std::make_tuple("AdamW", 0, 3),
                                           std::make_tuple("SGD", 5, 2)));

TEST(Swa, StateDictRoundTripContinuesTheAverage) {
  auto whole = zt::optim::make_shard_optimizer(spec("AdamW", 4, 1));
  torch::manual_seed(1);
  at::Tensor m1 = torch::randn({kNumel});
  at::Tensor m2 = m1.clone();
  run(*whole, m1, 1, kSwaSteps);
  // The same run, interrupted at step 7 (inside the window) and resumed from its state_dict.
  auto first = zt::optim::make_shard_optimizer(spec("AdamW", 4, 1));
  run(*first, m2, 1, 7);
  std::map<std::string, at::Tensor> saved;
  for (const auto& [k, v] : first->state_dict()) saved[k] = v.clone();
  auto second = zt::optim::make_shard_optimizer(spec("AdamW", 4, 1));
  second->load_state_dict(saved);
  EXPECT_EQ(second->step_count(), 7);
  run(*second, m2, 8, kSwaSteps);
  EXPECT_TRUE(m1.equal(m2));
  EXPECT_TRUE(dynamic_cast<SwaShardOptimizer&>(*whole).average().equal(
      dynamic_cast<SwaShardOptimizer&>(*second).average()));
}

TEST(Swa, NothingBeforeTheWindowAndBadOptionsThrow) {
  auto opt = zt::optim::make_shard_optimizer(spec("SGD", 100, 1));
  at::Tensor master = torch::zeros({kNumel});
  run(*opt, master, 1, 3);
  EXPECT_FALSE(opt->state_dict().count("swa_model"));
  EXPECT_THROW(zt::optim::make_shard_optimizer(spec("SGD", 0, 0)), zt::Error);
  EXPECT_THROW(zt::optim::make_shard_optimizer(spec("SGD", -1, 1)), zt::Error);
}

}  // namespace
