// load_by_name (train/load_by_name.h): values by name under a prefix, the report's three
// lists, and the one-line errors for a shape mismatch, a missing name and an unused value, each
// leaving the model untouched.
#include "train/load_by_name.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/error.h"

namespace {

using zt::train::load_by_name;
using zt::train::LoadByNameOptions;

struct Net : torch::nn::Module {
  Net() {
    trunk = register_module("trunk", torch::nn::Sequential(torch::nn::Linear(4, 3)));
    head = register_module("head", torch::nn::Linear(3, 1));
  }
  torch::nn::Sequential trunk{nullptr};
  torch::nn::Linear head{nullptr};
};

std::map<std::string, at::Tensor> trunk_values() {
  return {{"0.weight", torch::full({3, 4}, 2.0)}, {"0.bias", torch::full({3}, 3.0)}};
}

std::string error_of(Net& net, const std::map<std::string, at::Tensor>& src,
                     const LoadByNameOptions& o) {
  try {
    load_by_name(net, src, o);
  } catch (const zt::Error& e) {
    return e.what();
  }
  return "";
}

TEST(LoadByName, LoadsTrunkReportsHeadAsNew) {
  Net net;
  const at::Tensor head_before = net.head->weight.clone();
  auto r = load_by_name(net, trunk_values(), {"trunk.", {"head.*"}, {}});
  EXPECT_EQ(r.loaded, (std::vector<std::string>{"trunk.0.weight", "trunk.0.bias"}));
  EXPECT_EQ(r.fresh, (std::vector<std::string>{"head.weight", "head.bias"}));
  EXPECT_TRUE(r.skipped.empty());
  EXPECT_TRUE(net.trunk[0]->as<torch::nn::Linear>()->weight.equal(torch::full({3, 4}, 2.0)));
  EXPECT_TRUE(net.head->weight.equal(head_before));
  EXPECT_NE(r.summary().find("new 2 (head.weight, head.bias)"), std::string::npos) << r.summary();
}

TEST(LoadByName, ExpectedSkipsAreReported) {
  Net net;
  auto src = trunk_values();
  src["lm_extra"] = torch::zeros({2});
  auto r = load_by_name(net, src, {"trunk.", {"head.*"}, {"lm_extra", "0.bias"}});
  EXPECT_EQ(r.loaded, (std::vector<std::string>{"trunk.0.weight"}));
  EXPECT_EQ(r.skipped, (std::vector<std::string>{"0.bias", "lm_extra"}));
  EXPECT_FALSE(net.trunk[0]->as<torch::nn::Linear>()->bias.equal(torch::full({3}, 3.0)));
}

TEST(LoadByName, SurprisesAreOneLineErrorsAndLoadNothing) {
  Net net;
  const at::Tensor w = net.trunk[0]->as<torch::nn::Linear>()->weight.clone();
  auto bad = trunk_values();
  bad["0.bias"] = torch::zeros({5});
  std::string e = error_of(net, bad, {"trunk.", {"head.*"}, {}});
  EXPECT_NE(e.find("trunk.0.bias is [3] in the model, pretrained '0.bias' is [5]"),
            std::string::npos)
      << e;
  e = error_of(net, trunk_values(), {"trunk.", {}, {}});
  EXPECT_NE(e.find("head.weight has no pretrained value"), std::string::npos) << e;
  auto extra = trunk_values();
  extra["1.weight"] = torch::zeros({1});
  e = error_of(net, extra, {"trunk.", {"head.*"}, {}});
  EXPECT_NE(e.find("pretrained '1.weight' matches no model parameter"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
  EXPECT_TRUE(net.trunk[0]->as<torch::nn::Linear>()->weight.equal(w));
}

}  // namespace
