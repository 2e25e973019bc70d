// The config's `freeze` globs, as zt::initialize applies them (train/freeze.h).

#include "train/freeze.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/error.h"

namespace zt {
namespace {

struct EmbedAndLinear : torch::nn::Module {
  EmbedAndLinear() {
    embed = register_module("embed", torch::nn::Embedding(10, 4));
    fc = register_module("fc", torch::nn::Linear(4, 2));
  }
  torch::nn::Embedding embed{nullptr};
  torch::nn::Linear fc{nullptr};
};

TEST(FreezeParameters, GlobsOverFullNames) {
  EmbedAndLinear m;
  EXPECT_EQ(freeze_parameters(m, {"embed.*", "fc.b?as"}),
            (std::vector<std::string>{"embed.weight", "fc.bias"}));
  EXPECT_FALSE(m.embed->weight.requires_grad());
  EXPECT_FALSE(m.fc->bias.requires_grad());
  EXPECT_TRUE(m.fc->weight.requires_grad());
  EXPECT_TRUE(freeze_parameters(m, {}).empty());
}

TEST(FreezeParameters, PatternMatchingNothingIsAnError) {
  EmbedAndLinear m;
  try {
    freeze_parameters(m, {"fc.*", "wte.*"});
    FAIL() << "no error";
  } catch (const zt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'wte.*'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zt
