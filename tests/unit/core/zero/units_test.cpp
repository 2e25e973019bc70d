// Stage-3 units chosen by class (zero::units_of_types) instead of by name, units declared
// inside others (zero::plan_units), and which units stay gathered from forward to backward
// (zero::kept_for_backward).
#include "core/zero/units.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/error.h"
#include "core/zero/bucket_plan.h"

namespace zt::zero {
namespace {

struct BlockImpl : torch::nn::Module {
  BlockImpl() {
    fc = register_module("fc", torch::nn::Linear(4, 4));
    inner = register_module("inner", torch::nn::Linear(4, 4));
  }
  torch::nn::Linear fc{nullptr}, inner{nullptr};
};
TORCH_MODULE(Block);

struct Net : torch::nn::Module {
  Net() {
    emb = register_module("emb", torch::nn::Embedding(8, 4));
    blocks = register_module("blocks", torch::nn::ModuleList(Block(), Block(), Block()));
    head = register_module("head", torch::nn::Linear(4, 8));
  }
  torch::nn::Embedding emb{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::Linear head{nullptr};
};

TEST(UnitsOfTypes, EveryModuleOfTheClassInOrderWithOrWithoutImpl) {
  Net net;
  const std::vector<std::string> want = {"blocks.0", "blocks.1", "blocks.2"};
  EXPECT_EQ(units_of_types(net, {"Block"}), want);
  EXPECT_EQ(units_of_types(net, {"BlockImpl"}), want);
  EXPECT_EQ(units_of_types(net, {"zt::zero::(anonymous namespace)::BlockImpl"}), want);
  EXPECT_TRUE(units_of_types(net, {}).empty());
}

TEST(UnitsOfTypes, NestedMatchesBelongToTheOuterUnit) {
  // Linear is both a block's member and the head: the head is a unit, a block's fc is not one
  // of its own when the block is.
  Net net;
  const std::vector<std::string> want = {"blocks.0", "blocks.1", "blocks.2", "head"};
  EXPECT_EQ(units_of_types(net, {"Block", "Linear"}), want);
  // The plan accepts them: no parameter in two units.
  auto shared = std::make_shared<Net>();  // plan_units walks the model with include_self
  UnitPlan plan = plan_units(*shared, units_of_types(*shared, {"Block", "Linear"}));
  EXPECT_EQ(plan.units.size(), want.size() + 1);  // and the root (emb)
}

struct RoutedLinearImpl : torch::nn::LinearImpl, RoutedUnit {
  RoutedLinearImpl() : torch::nn::LinearImpl(4, 4) {}
};

TEST(PlanUnits, AUnitInsideAnotherTakesItsOwnParametersWhicheverIsNamedFirst) {
  auto net = std::make_shared<Net>();
  for (const std::vector<std::string>& names :
       {std::vector<std::string>{"blocks.0", "blocks.0.inner", "blocks.1"},
        std::vector<std::string>{"blocks.0.inner", "blocks.0", "blocks.1"}}) {
    UnitPlan plan = plan_units(*net, names);
    ASSERT_EQ(plan.units.size(), 4u);
    for (size_t u = 0; u < names.size(); ++u) {
      EXPECT_EQ(plan.units[u]->name, names[u]);  // in the order declared
      std::vector<std::string> got;
      for (const auto& p : plan.units[u]->params) got.push_back(p.first);
      const std::vector<std::string> want =
          names[u] == "blocks.0.inner"
              ? std::vector<std::string>{"blocks.0.inner.weight", "blocks.0.inner.bias"}
          : names[u] == "blocks.0"
              ? std::vector<std::string>{"blocks.0.fc.weight", "blocks.0.fc.bias"}
              : std::vector<std::string>{"blocks.1.fc.weight", "blocks.1.fc.bias",
                                         "blocks.1.inner.weight", "blocks.1.inner.bias"};
      EXPECT_EQ(got, want) << names[u];
      EXPECT_FALSE(plan.units[u]->routed);
    }
  }
  // Two units that share a parameter without one holding the other: the same unit twice.
  try {
    plan_units(*net, {"blocks.0", "blocks.0"});
    FAIL() << "no error";
  } catch (const zt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("belongs to two engine units"), std::string::npos)
        << e.what();
  }
}

TEST(PlanUnits, ARoutedModuleMakesARoutedUnit) {
  auto net = std::make_shared<Net>();
  BlockImpl* block = net->blocks[1]->as<BlockImpl>();
  block->inner = torch::nn::Linear(std::shared_ptr<torch::nn::LinearImpl>(
      block->replace_module("inner", std::make_shared<RoutedLinearImpl>())));
  UnitPlan plan = plan_units(*net, {"blocks.1", "blocks.1.inner"});
  EXPECT_FALSE(plan.units[0]->routed);
  EXPECT_TRUE(plan.units[1]->routed);
  EXPECT_EQ(plan.units[1]->params.size(), 2u);
}

TEST(UnitsOfTypes, ATypeMatchingNothingIsAnErrorNamingIt) {
  Net net;
  try {
    units_of_types(net, {"Block", "DecoderLayer"});
    FAIL() << "no error";
  } catch (const zt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'DecoderLayer' matches no submodule"), std::string::npos)
        << e.what();
  }
}

// Cases run on DeepSpeed 0.19.8 (stage 3, one rank, a Sequential of four bias-free
// Linear(10, 10), stage3_param_persistence_threshold 0, prefetch off): after the third step's
// forward, the layers whose parameters were still AVAILABLE, per stage3_max_reuse_distance.
// The Sequential holds no parameters of its own: the root is empty.
TEST(KeptForBackward, AsDeepSpeedKeepsLayersByReuseDistance) {
  const std::vector<int64_t> numel = {100, 100, 100, 100, 0};
  const std::vector<bool> routed(5, false);
  const std::vector<std::pair<int64_t, std::vector<bool>>> deepspeed = {
      {0, {false, false, false, false}},        {150, {false, false, false, true}},
      {201, {false, false, true, true}},        {399, {false, false, true, true}},
      {401, {false, true, true, true}},         {599, {false, true, true, true}},
      {601, {true, true, true, true}},          {1000, {true, true, true, true}},
      {1'000'000'000, {true, true, true, true}}};
  for (const auto& [distance, layers] : deepspeed) {
    std::vector<bool> want = layers;
    want.push_back(false);  // the root is gathered throughout, never "kept"
    EXPECT_EQ(kept_for_backward(numel, routed, distance), want) << "distance " << distance;
  }
}

// The root (embeddings, head) counts on both sides of the turn; a routed unit (a layer's
// experts) is gathered by its routing and never kept, though its elements count for the others.
TEST(KeptForBackward, TheRootCountsTwiceAndRoutedUnitsAreNeverKept) {
  // Units: a layer of 100, its experts (routed, 300), a layer of 100; the root 50.
  const std::vector<int64_t> numel = {100, 300, 100, 50};
  const std::vector<bool> routed = {false, true, false, false};
  // The last layer: 2 * 50 = 100 elements to its backward; the first: 2 * (300 + 100 + 50).
  EXPECT_EQ(kept_for_backward(numel, routed, 100), (std::vector<bool>{false, false, false, false}));
  EXPECT_EQ(kept_for_backward(numel, routed, 101), (std::vector<bool>{false, false, true, false}));
  EXPECT_EQ(kept_for_backward(numel, routed, 901), (std::vector<bool>{true, false, true, false}));
  EXPECT_THROW(kept_for_backward({}, {}, 10), Error);
}

}  // namespace
}  // namespace zt::zero
