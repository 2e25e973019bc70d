// Stage-3 units chosen by class (zero::units_of_types) instead of by name.
#include "core/zero/units.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/error.h"

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

}  // namespace
}  // namespace zt::zero
