// The FLOPs counter (core/profile/flop_counter.h) against closed-form counts of single ops run
// for real: matrix products, attention, elementwise work, each phase, recomputation, module
// attribution; the peak table; the flops_profiler config block.

#include "core/profile/flop_counter.h"

#include <string>
#include <vector>

#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/config/config.h"
#include "core/config/engine_config.h"
#include "core/profile/device_peak.h"

namespace zt::profile {
namespace {

// Counts what fn runs in `phase`.
FlopTotals count(Phase phase, const std::function<void()>& fn) {
  FlopCounter c;
  c.start();
  c.set_phase(phase);
  fn();
  c.set_phase(Phase::kIdle);
  c.stop();
  return c.totals();
}

TEST(FlopCounter, MatrixProductsCountTwoFlopsPerMultiplyAdd) {
  const auto a = torch::randn({5, 7}), b = torch::randn({7, 3});
  EXPECT_DOUBLE_EQ(count(Phase::kForward, [&] { at::mm(a, b); }).forward, 2.0 * 5 * 7 * 3);
  // addmm's bias is not counted; a linear layer with bias is one addmm.
  const auto w = torch::randn({3, 7}), bias = torch::randn({3});
  EXPECT_DOUBLE_EQ(count(Phase::kForward, [&] { at::linear(a, w, bias); }).forward,
                   2.0 * 5 * 7 * 3);
  // A 3-d input goes through matmul/mm or addmm: counted once either way.
  const auto x = torch::randn({2, 5, 7});
  EXPECT_DOUBLE_EQ(count(Phase::kForward, [&] { at::linear(x, w, bias); }).forward,
                   2.0 * 2 * 5 * 7 * 3);
  EXPECT_DOUBLE_EQ(count(Phase::kForward, [&] { at::linear(x, w); }).forward, 2.0 * 2 * 5 * 7 * 3);
  // Batched: a 4-d matmul is one bmm over the flattened batch.
  const auto p = torch::randn({2, 3, 4, 6}), q = torch::randn({2, 3, 6, 5});
  EXPECT_DOUBLE_EQ(count(Phase::kForward, [&] { at::matmul(p, q); }).forward, 2.0 * 6 * 4 * 6 * 5);
  EXPECT_DOUBLE_EQ(count(Phase::kForward, [&] { at::mv(a, torch::randn({7})); }).forward,
                   2.0 * 5 * 7);
}

TEST(FlopCounter, BackwardOfALinearLayerIsTwiceItsForward) {
  auto w = torch::randn({3, 7}, torch::requires_grad());
  auto x = torch::randn({4, 7}, torch::requires_grad());
  FlopCounter c;
  c.start();
  c.set_phase(Phase::kForward);
  auto y = at::linear(x, w);
  c.set_phase(Phase::kBackward);
  y.backward(torch::ones_like(y));
  c.set_phase(Phase::kIdle);
  c.stop();
  EXPECT_DOUBLE_EQ(c.totals().forward, 2.0 * 4 * 7 * 3);
  EXPECT_DOUBLE_EQ(c.totals().backward, 2 * 2.0 * 4 * 7 * 3);
  EXPECT_DOUBLE_EQ(c.totals().model(), 3 * 2.0 * 4 * 7 * 3);
}

TEST(FlopCounter, IdleOpsAreNotCountedAndNothingIsRegisteredAfterStop) {
  const auto a = torch::randn({8, 8});
  EXPECT_DOUBLE_EQ(count(Phase::kIdle, [&] { at::mm(a, a); }).model(), 0);
  {
    FlopCounter c;
    c.start();
    EXPECT_TRUE(at::hasGlobalCallbacks());
    EXPECT_EQ(FlopCounter::active(), &c);
  }
  EXPECT_FALSE(at::hasGlobalCallbacks());
  EXPECT_EQ(FlopCounter::active(), nullptr);
}

TEST(FlopCounter, CountersCountSideBySideEachByItsPhase) {
  const auto a = torch::randn({4, 4});
  FlopCounter fwd, bwd;
  fwd.start();
  bwd.start();
  fwd.set_phase(Phase::kForward);
  bwd.set_phase(Phase::kBackward);
  at::mm(a, a);
  bwd.stop();
  at::mm(a, a);
  fwd.stop();
  EXPECT_DOUBLE_EQ(fwd.totals().forward, 2 * 2.0 * 64);
  EXPECT_DOUBLE_EQ(bwd.totals().backward, 2.0 * 64);
  EXPECT_FALSE(at::hasGlobalCallbacks());
}

// q (b, h, s, d), k/v (b, h, t, d): forward 4 b h s t d; backward 8 b h s t d plus the 2 b h s t d
// of the recomputed scores; the causal mask does not halve the count (PyTorch's convention).
TEST(FlopCounter, FusedAttentionForwardAndBackward) {
  const int64_t b = 2, h = 3, s = 16, d = 8;
  auto q = torch::randn({b, h, s, d}, torch::requires_grad());
  auto k = torch::randn({b, h, s, d}, torch::requires_grad());
  auto v = torch::randn({b, h, s, d}, torch::requires_grad());
  FlopCounter c;
  c.start();
  c.set_phase(Phase::kForward);
  auto y = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
  c.set_phase(Phase::kBackward);
  y.sum().backward();
  c.set_phase(Phase::kIdle);
  c.stop();
  const double fwd = 4.0 * b * h * s * s * d;
  EXPECT_DOUBLE_EQ(c.totals().forward, fwd);
  EXPECT_DOUBLE_EQ(c.totals().backward, 2 * fwd);
  EXPECT_DOUBLE_EQ(c.totals().recompute, fwd / 2);
}

// Grouped-query attention: every query head attends, so heads are counted from q.
TEST(FlopCounter, GroupedQueryAttentionCountsQueryHeads) {
  const int64_t b = 1, h = 4, kv = 2, s = 8, d = 4;
  auto q = torch::randn({b, h, s, d}), k = torch::randn({b, kv, s, d}),
       v = torch::randn({b, kv, s, d});
  const FlopTotals t = count(Phase::kForward, [&] {
    at::scaled_dot_product_attention(q, k, v, {}, 0.0, true, std::nullopt, /*enable_gqa=*/true);
  });
  EXPECT_DOUBLE_EQ(t.forward, 4.0 * b * h * s * s * d);
}

// With a mask the math path may run: its bmm's are counted instead, to the same total.
TEST(FlopCounter, MaskedAttentionCountsTheSameProducts) {
  const int64_t b = 2, h = 2, s = 8, d = 4;
  auto q = torch::randn({b, h, s, d}), k = torch::randn({b, h, s, d}),
       v = torch::randn({b, h, s, d});
  auto mask = torch::ones({b, 1, s, s}, torch::kBool).tril();
  const FlopTotals t =
      count(Phase::kForward, [&] { at::scaled_dot_product_attention(q, k, v, mask); });
  EXPECT_DOUBLE_EQ(t.forward, 4.0 * b * h * s * s * d);
}

TEST(FlopCounter, ElementwiseCountsBroadcastElements) {
  const auto x = torch::randn({2, 3, 4}), bias = torch::randn({4});
  const FlopTotals add = count(Phase::kForward, [&] { x + bias; });
  EXPECT_DOUBLE_EQ(add.other, 24);
  EXPECT_DOUBLE_EQ(add.model(), 0);
  auto y = x.clone();
  EXPECT_DOUBLE_EQ(count(Phase::kForward, [&] { y.mul_(2.0); }).other, 24);
  EXPECT_DOUBLE_EQ(count(Phase::kForward, [&] { at::gelu(x); }).other, 24);
  // Layer norm: DeepSpeed's estimate of 5 per element with an affine transform.
  const auto w = torch::ones({4}), b = torch::zeros({4});
  EXPECT_DOUBLE_EQ(count(Phase::kForward, [&] { at::layer_norm(x, {4}, w, b); }).other, 5 * 24);
  // Copies, views and indexing are not flops.
  EXPECT_DOUBLE_EQ(count(Phase::kForward,
                         [&] {
                           x.transpose(0, 1).contiguous().index_select(0, torch::tensor({0}));
                         }).other +
                       count(Phase::kForward, [&] { x.clone(); }).other,
                   0);
}

TEST(FlopCounter, RecomputeScopeCountsApart) {
  const auto a = torch::randn({4, 6}), b = torch::randn({6, 5});
  FlopCounter c;
  c.start();
  c.set_phase(Phase::kBackward);
  {
    RecomputeScope r;
    at::mm(a, b);
  }
  at::mm(a, b);
  c.stop();
  EXPECT_DOUBLE_EQ(c.totals().recompute, 2.0 * 4 * 6 * 5);
  EXPECT_DOUBLE_EQ(c.totals().backward, 2.0 * 4 * 6 * 5);
  EXPECT_DOUBLE_EQ(c.totals().forward, 0);
}

struct TwoLayersImpl : torch::nn::Module {
  TwoLayersImpl() {
    first = register_module("first", torch::nn::Linear(6, 8));
    second = register_module("second", torch::nn::Linear(8, 4));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    ModuleScope scope(*this);
    return at::relu(second->forward(torch::tanh(first->forward(x))));
  }
  torch::nn::Linear first{nullptr}, second{nullptr};
};
TORCH_MODULE(TwoLayers);

TEST(FlopCounter, OpsAreChargedToTheModuleOwningTheirParameters) {
  TwoLayers m;
  const auto x = torch::randn({3, 6});
  FlopCounter c;
  c.start();
  c.track_modules(m.get());
  c.set_phase(Phase::kForward);
  {
    torch::NoGradGuard no_grad;
    m->forward(x);
  }
  c.stop();
  const auto mods = c.module_flops();
  ASSERT_TRUE(mods.count(m->first.get()));
  ASSERT_TRUE(mods.count(m->second.get()));
  EXPECT_DOUBLE_EQ(mods.at(m->first.get()).matmul, 2.0 * 3 * 6 * 8);
  EXPECT_DOUBLE_EQ(mods.at(m->second.get()).matmul, 2.0 * 3 * 8 * 4);
  // tanh and relu read no parameter: charged to the open scope, which was timed once.
  ASSERT_TRUE(mods.count(m.get()));
  EXPECT_DOUBLE_EQ(mods.at(m.get()).other, 3 * 8 + 3 * 4);
  EXPECT_EQ(mods.at(m.get()).calls, 1);
  EXPECT_GT(mods.at(m.get()).seconds, 0);
}

TEST(DevicePeak, KnownDevicesByNameAndDtype) {
  EXPECT_DOUBLE_EQ(known_peak_tflops("NVIDIA H100 80GB HBM3", at::kBFloat16), 989.4);
  EXPECT_DOUBLE_EQ(known_peak_tflops("NVIDIA H100 PCIe", at::kHalf), 756.5);
  EXPECT_DOUBLE_EQ(known_peak_tflops("NVIDIA H200", at::kFloat), 66.9);
  EXPECT_DOUBLE_EQ(known_peak_tflops("NVIDIA A100-SXM4-80GB", at::kBFloat16), 312.0);
  EXPECT_DOUBLE_EQ(known_peak_tflops("NVIDIA L40S", at::kBFloat16), 362.05);
  EXPECT_DOUBLE_EQ(known_peak_tflops("NVIDIA L40", at::kBFloat16), 181.05);
  EXPECT_DOUBLE_EQ(known_peak_tflops("Tesla V100-SXM2-32GB", at::kHalf), 125.0);
  EXPECT_DOUBLE_EQ(known_peak_tflops("Tesla V100-SXM2-32GB", at::kBFloat16), 0);
  EXPECT_DOUBLE_EQ(known_peak_tflops("cpu", at::kFloat), 0);
  EXPECT_EQ(device_name(c10::Device(c10::kCPU)), "cpu");
}

ConfigReport flops_config(const std::string& block) {
  return check_config(R"({"train_batch_size": 4, "flops_profiler": )" + block + "}",
                      ConfigFormat::kJson, {}, 1);
}

TEST(FlopsProfilerConfig, DeepSpeedKeysReachTheEngine) {
  const ConfigReport r = flops_config(
      R"({"enabled": true, "profile_step": 3, "module_depth": 2, "top_modules": 4,
          "detailed": false, "output_file": "/tmp/p.txt", "peak_tflops": 12.5})");
  ASSERT_TRUE(r.errors.empty()) << r.errors[0];
  EXPECT_TRUE(r.warnings.empty()) << r.warnings[0];
  const EngineOptions o = engine_options_from_config(*r.config);
  EXPECT_TRUE(o.flops_profiler.enabled);
  EXPECT_EQ(o.flops_profiler.profile_step, 3);
  EXPECT_EQ(o.flops_profiler.module_depth, 2);
  EXPECT_EQ(o.flops_profiler.top_modules, 4);
  EXPECT_FALSE(o.flops_profiler.detailed);
  EXPECT_EQ(o.flops_profiler.output_file, "/tmp/p.txt");
  EXPECT_DOUBLE_EQ(o.flops_profiler.peak_tflops, 12.5);
  EXPECT_EQ(o.flops_profiler.micro_batch_size, 4);
}

TEST(FlopsProfilerConfig, DeepSpeedDefaults) {
  const ConfigReport r = flops_config(R"({"enabled": true, "output_file": null})");
  ASSERT_TRUE(r.errors.empty()) << r.errors[0];
  const FlopsProfilerConfig& f = r.config->flops_profiler;
  EXPECT_EQ(f.profile_step, 1);
  EXPECT_EQ(f.module_depth, -1);
  EXPECT_EQ(f.top_modules, 1);
  EXPECT_TRUE(f.detailed);
  EXPECT_TRUE(f.output_file.empty());
  EXPECT_FALSE(engine_options_from_config(*flops_config("{}").config).flops_profiler.enabled);
}

TEST(FlopsProfilerConfig, BadValuesNameTheKeyAndTheFactorWarns) {
  ConfigReport r = flops_config(R"({"top_modules": 0, "module_depth": -2, "peak_tflops": -1})");
  ASSERT_EQ(r.errors.size(), 3u);
  EXPECT_EQ(r.errors[0].rfind("flops_profiler.", 0), 0u) << r.errors[0];
  r = flops_config(R"({"enabled": true, "recompute_fwd_factor": 1.0})");
  ASSERT_TRUE(r.errors.empty());
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0].rfind("flops_profiler.recompute_fwd_factor: no effect", 0), 0u)
      << r.warnings[0];
}

}  // namespace
}  // namespace zt::profile
