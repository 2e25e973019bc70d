// The config's Muon block (core/config): every key DeepSpeed's engine reads acts on the engine
// options with DeepSpeed's defaults, the keys DeepSpeed ignores warn once, and bad values are
// errors naming the key.

#include <string>

#include <gtest/gtest.h>

#include "core/config/config.h"
#include "core/config/engine_config.h"

namespace zt {
namespace {

ConfigReport check(const std::string& params) {
  return check_config(
      R"({"train_batch_size": 8, "optimizer": {"type": "muon", "params": )" + params + "}}",
      ConfigFormat::kJson, {}, 1);
}

std::string joined(const std::vector<std::string>& lines) {
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  return all;
}

TEST(MuonConfig, DefaultsAreMuonWithAuxAdams) {
  ConfigReport r = check(R"({"lr": 0.02})");
  ASSERT_TRUE(r.errors.empty()) << joined(r.errors);
  EXPECT_TRUE(r.warnings.empty()) << joined(r.warnings);
  EngineOptions o = engine_options_from_config(*r.config, {});
  EXPECT_EQ(o.optimizer.type, optim::OptimizerKind::kMuon);
  EXPECT_TRUE(o.optimizer.adamw_mode);
  EXPECT_DOUBLE_EQ(o.hyper.momentum, 0.95);
  EXPECT_DOUBLE_EQ(o.hyper.beta1, 0.9);
  EXPECT_DOUBLE_EQ(o.hyper.beta2, 0.95);
  EXPECT_DOUBLE_EQ(o.hyper.eps, 1e-10);
  EXPECT_DOUBLE_EQ(o.hyper.weight_decay, 0.0);
  EXPECT_EQ(o.optimizer.muon.ns_method, optim::NsMethod::kGram);
  EXPECT_DOUBLE_EQ(o.optimizer.muon.muon_lr_scale, 1.0);
  EXPECT_DOUBLE_EQ(o.optimizer.muon.adam_lr_scale, 1.0);
}

TEST(MuonConfig, EveryKeyActs) {
  ConfigReport r = check(
      R"({"lr": 0.02, "momentum": 0.9, "weight_decay": 0.1, "ns_method": "standard",
          "muon_lr": 0.04, "betas": [0.8, 0.99], "eps": 1e-8, "adam_lr": 0.005,
          "adam_w_mode": false, "ns_steps": 5, "nesterov": true, "per_head_muon": false})");
  ASSERT_TRUE(r.errors.empty()) << joined(r.errors);
  EXPECT_TRUE(r.warnings.empty()) << joined(r.warnings);  // ns_steps 5, nesterov: what runs
  EngineOptions o = engine_options_from_config(*r.config, {});
  EXPECT_FALSE(o.optimizer.adamw_mode);
  EXPECT_DOUBLE_EQ(o.hyper.lr, 0.02);
  EXPECT_DOUBLE_EQ(o.hyper.momentum, 0.9);
  EXPECT_DOUBLE_EQ(o.hyper.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(o.hyper.beta1, 0.8);
  EXPECT_DOUBLE_EQ(o.hyper.beta2, 0.99);
  EXPECT_DOUBLE_EQ(o.hyper.eps, 1e-8);
  EXPECT_EQ(o.optimizer.muon.ns_method, optim::NsMethod::kStandard);
  EXPECT_DOUBLE_EQ(o.optimizer.muon.muon_lr_scale, 2.0);
  EXPECT_DOUBLE_EQ(o.optimizer.muon.adam_lr_scale, 0.25);
}

TEST(MuonConfig, KeysDeepSpeedIgnoresWarnOnce) {
  ConfigReport r =
      check(R"({"lr": 0.02, "ns_steps": 3, "nesterov": false, "per_head_muon": true})");
  ASSERT_TRUE(r.errors.empty()) << joined(r.errors);
  const std::string all = joined(r.warnings);
  EXPECT_EQ(r.warnings.size(), 3u) << all;
  EXPECT_NE(all.find("optimizer.params.ns_steps"), std::string::npos) << all;
  EXPECT_NE(all.find("optimizer.params.nesterov"), std::string::npos) << all;
  EXPECT_NE(all.find("optimizer.params.per_head_muon"), std::string::npos) << all;
}

TEST(MuonConfig, BadValuesNameTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"ns_method": "svd"})", "optimizer.params.ns_method"},
      {R"({"momentum": 1.0})", "optimizer.params.momentum"},
      {R"({"betas": [0.9]})", "optimizer.params.betas"},
      {R"({"eps": 0})", "optimizer.params.eps"},
      {R"({"lr": 0, "muon_lr": 0.02})", "optimizer.params.muon_lr"},
      {R"({"amsgrad": true})", "optimizer.params.amsgrad"},
      {R"({"fp32_optimizer_states": false})", "optimizer.params.fp32_optimizer_states"}};
  for (const auto& [params, key] : cases) {
    ConfigReport r = check(params);
    ASSERT_FALSE(r.errors.empty()) << params;
    EXPECT_NE(r.errors[0].find(key), std::string::npos) << params << ": " << r.errors[0];
  }
}

TEST(MuonConfig, NvmeOffloadIsRefused) {
  ConfigReport r = check_config(
      R"({"train_batch_size": 8, "optimizer": {"type": "Muon", "params": {"lr": 0.02}},
          "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme",
          "nvme_path": "/tmp"}}})",
      ConfigFormat::kJson, {}, 1);
  ASSERT_FALSE(r.errors.empty());
  EXPECT_NE(joined(r.errors).find("offload_optimizer.device"), std::string::npos)
      << joined(r.errors);
}

}  // namespace
}  // namespace zt
