// Adam, AdamW, SGD and Lion on flat shards against LibTorch's torch::optim (or, for Lion, a
// hand-written reference): several groups with different hyper-parameters, padding between them,
// 20 steps of random gradients.
#include "optim/shard_optimizer.h"

#include <cmath>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/error.h"
#include "optim/cpu_adam.h"

namespace {

using zt::optim::GroupHyper;
using zt::optim::GroupRange;

constexpr int kSteps = 20;

zt::optim::OptimizerSpec spec_of(const std::string& type) {
  zt::optim::OptimizerSpec s;
  s.type = zt::optim::optimizer_kind(type);
  return s;
}

// Three "parameters" in one shard with padding between and after them.
struct Layout {
  std::vector<GroupRange> groups;
  int64_t numel = 0;
};

Layout make_layout(const std::vector<GroupHyper>& hypers) {
  const int64_t sizes[] = {1000, 37, 4099};
  Layout l;
  int64_t off = 3;  // leading padding
  for (size_t i = 0; i < hypers.size(); ++i) {
    l.groups.push_back({off, off + sizes[i % 3], hypers[i]});
    off += sizes[i % 3] + 5;
  }
  l.numel = off;
  return l;
}

// max |a - b| / max |b| over the grouped elements: "relative" error of the whole parameter.
double rel_error(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

// Builds torch::optim's optimizer over one leaf tensor per group.
using RefFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(
    std::vector<torch::Tensor>&, const std::vector<GroupRange>&)>;

void run_against_reference(const std::string& type, const std::vector<GroupHyper>& hypers,
                           const RefFactory& make_ref, double tol,
                           torch::ScalarType half_dtype = torch::kBFloat16) {
  torch::manual_seed(42);
  Layout l = make_layout(hypers);
  torch::Tensor master = torch::randn({l.numel});
  const torch::Tensor initial = master.clone();
  std::vector<torch::Tensor> ref;
  for (const GroupRange& g : l.groups) {
    ref.push_back(master.narrow(0, g.begin, g.end - g.begin).clone().requires_grad_(true));
  }
  auto ref_opt = make_ref(ref, l.groups);
  zt::optim::OptimizerSpec spec;
  spec.type = zt::optim::optimizer_kind(type);
  auto opt = zt::optim::make_shard_optimizer(spec);
  torch::Tensor half = torch::zeros({l.numel}, half_dtype);
  for (int s = 0; s < kSteps; ++s) {
    torch::Tensor grad = torch::randn({l.numel}) * (1.0 + s % 3);
    for (size_t i = 0; i < ref.size(); ++i) {
      const GroupRange& g = l.groups[i];
      ref[i].mutable_grad() = grad.narrow(0, g.begin, g.end - g.begin).clone();
    }
    ref_opt->step();
    opt->step(master, grad, l.groups, &half);
  }
  EXPECT_EQ(opt->step_count(), kSteps);
  for (size_t i = 0; i < ref.size(); ++i) {
    const GroupRange& g = l.groups[i];
    torch::Tensor mine = master.narrow(0, g.begin, g.end - g.begin);
    EXPECT_LT(rel_error(mine, ref[i].detach()), tol) << type << " group " << i;
    EXPECT_TRUE(torch::equal(half.narrow(0, g.begin, g.end - g.begin), mine.to(half.scalar_type())))
        << "half copy of group " << i;
  }
  // Padding never touched.
  torch::Tensor touched = torch::zeros({l.numel}, torch::kBool);
  for (const GroupRange& g : l.groups) touched.narrow(0, g.begin, g.end - g.begin).fill_(true);
  EXPECT_TRUE(torch::equal(master.masked_select(~touched), initial.masked_select(~touched)));
  EXPECT_EQ(half.masked_select(~touched).abs().sum().item<float>(), 0.0f);
}

std::vector<GroupHyper> adam_hypers() {
  GroupHyper a;
  a.lr = 1e-2;
  a.weight_decay = 0.1;
  GroupHyper b;
  b.lr = 3e-3;
  b.weight_decay = 0;
  b.beta1 = 0.8;
  b.beta2 = 0.95;
  b.eps = 1e-6;
  GroupHyper c;
  c.lr = 5e-2;
  c.weight_decay = 0.01;
  return {a, b, c};
}

template <typename Options, typename Opt>
RefFactory adam_ref() {
  return [](std::vector<torch::Tensor>& params, const std::vector<GroupRange>& groups) {
    std::vector<torch::optim::OptimizerParamGroup> pg;
    for (size_t i = 0; i < params.size(); ++i) {
      const GroupHyper& h = groups[i].hyper;
      auto o = std::make_unique<Options>(h.lr);
      o->betas({h.beta1, h.beta2}).eps(h.eps).weight_decay(h.weight_decay);
      pg.emplace_back(std::vector<torch::Tensor>{params[i]}, std::move(o));
    }
    return std::make_unique<Opt>(pg, Options(1e-3));
  };
}

TEST(ShardOptimizer, AdamMatchesTorch) {
  run_against_reference("Adam", adam_hypers(),
                        adam_ref<torch::optim::AdamOptions, torch::optim::Adam>(), 1e-6);
}

TEST(ShardOptimizer, AdamWMatchesTorch) {
  run_against_reference("AdamW", adam_hypers(),
                        adam_ref<torch::optim::AdamWOptions, torch::optim::AdamW>(), 1e-6,
                        torch::kHalf);
}

std::vector<GroupHyper> sgd_hypers() {
  GroupHyper a;  // plain momentum with L2 decay and dampening
  a.lr = 0.05;
  a.momentum = 0.9;
  a.weight_decay = 1e-2;
  a.dampening = 0.1;
  GroupHyper b;  // Nesterov
  b.lr = 0.02;
  b.momentum = 0.8;
  b.nesterov = true;
  GroupHyper c;  // no momentum
  c.lr = 0.1;
  c.weight_decay = 1e-3;
  return {a, b, c};
}

TEST(ShardOptimizer, SgdMatchesTorch) {
  RefFactory ref = [](std::vector<torch::Tensor>& params, const std::vector<GroupRange>& groups) {
    std::vector<torch::optim::OptimizerParamGroup> pg;
    for (size_t i = 0; i < params.size(); ++i) {
      const GroupHyper& h = groups[i].hyper;
      auto o = std::make_unique<torch::optim::SGDOptions>(h.lr);
      o->momentum(h.momentum)
          .nesterov(h.nesterov)
          .weight_decay(h.weight_decay)
          .dampening(h.dampening);
      pg.emplace_back(std::vector<torch::Tensor>{params[i]}, std::move(o));
    }
    return std::make_unique<torch::optim::SGD>(pg, torch::optim::SGDOptions(1e-3));
  };
  run_against_reference("SGD", sgd_hypers(), ref, 1e-6);
}

TEST(ShardOptimizer, LionMatchesHandWrittenReference) {
  torch::manual_seed(3);
  const int64_t n = 5000;
  torch::Tensor master = torch::randn({n});
  std::vector<double> p(master.data_ptr<float>(), master.data_ptr<float>() + n);
  std::vector<double> m(n, 0.0);
  GroupHyper h;
  h.lr = 1e-3;
  h.weight_decay = 0.1;
  h.beta1 = 0.9;
  h.beta2 = 0.99;
  auto opt = zt::optim::make_shard_optimizer(spec_of("Lion"));
  for (int s = 0; s < kSteps; ++s) {
    torch::Tensor grad = torch::randn({n});
    const float* g = grad.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) {
      double c = h.beta1 * m[i] + (1 - h.beta1) * g[i];
      p[i] = p[i] * (1 - h.lr * h.weight_decay) - h.lr * ((c > 0) - (c < 0));
      m[i] = h.beta2 * m[i] + (1 - h.beta2) * g[i];
    }
    opt->step(master, grad, {{0, n, h}});
  }
  torch::Tensor expected = torch::tensor(p, torch::kDouble).to(torch::kFloat);
  EXPECT_LT(rel_error(master, expected), 1e-6);
  EXPECT_EQ(opt->state_bytes(), n * 4);
}

// Saving after k steps and loading into a fresh optimizer continues bit-identically.
class StateDictRoundTrip : public testing::TestWithParam<std::string> {};

TEST_P(StateDictRoundTrip, ContinuesIdentically) {
  torch::manual_seed(7);
  const int64_t n = 3000;
  GroupHyper h;
  h.lr = 1e-2;
  h.momentum = 0.9;
  h.weight_decay = 0.01;
  std::vector<GroupRange> groups{{0, 1000, h}, {1200, n, h}};
  zt::optim::OptimizerSpec spec;
  spec.type = zt::optim::optimizer_kind(GetParam());
  auto a = zt::optim::make_shard_optimizer(spec);
  torch::Tensor pa = torch::randn({n});
  std::vector<torch::Tensor> grads;
  for (int s = 0; s < 6; ++s) grads.push_back(torch::randn({n}));
  for (int s = 0; s < 3; ++s) a->step(pa, grads[s], groups);
  auto b = zt::optim::make_shard_optimizer(spec);
  std::map<std::string, torch::Tensor> saved;
  for (auto& [k, v] : a->state_dict()) saved[k] = v.clone();
  b->load_state_dict(saved);
  EXPECT_EQ(b->step_count(), 3);
  EXPECT_EQ(b->state_bytes(), a->state_bytes());
  torch::Tensor pb = pa.clone();
  for (int s = 3; s < 6; ++s) {
    a->step(pa, grads[s], groups);
    b->step(pb, grads[s], groups);
  }
  EXPECT_TRUE(torch::equal(pa, pb));
}

INSTANTIATE_TEST_SUITE_P(Types, StateDictRoundTrip,
                         testing::Values("Adam", "AdamW", "SGD", "Lion"));

// GroupHyper::grad_scale: a step with factor s on g is bit for bit the step with factor 1 on
// g * float(s) (the engine's averaging, unscaling and clipping, folded into the optimizer's pass,
// round as a separate multiply did), for every optimizer and SIMD build, and g is never written.
struct GradScaleCase {
  std::string type;
  std::string simd;
};

class GradScale : public testing::TestWithParam<GradScaleCase> {};

TEST_P(GradScale, EqualsAStepOnThePrescaledGradient) {
  const GradScaleCase c = GetParam();
  try {
    zt::optim::parse_simd_path(c.simd);
  } catch (const zt::Error&) {
    GTEST_SKIP() << "this CPU lacks " << c.simd;
  }
  for (const bool adamw : {true, false}) {
    torch::manual_seed(11);
    const int64_t n = 9000;  // above Adam8bit's min_8bit_size: the quantized pass
    GroupHyper h1, h2;
    h1.lr = 1e-2;
    h1.weight_decay = 0.1;
    h1.momentum = 0.9;
    h2 = h1;
    h2.weight_decay = 0;
    h2.lr = 3e-3;
    const double scale = 0.37 / 3.0;  // not a power of two: the rounding of g * s shows
    std::vector<GroupRange> scaled{{0, 4000, h1}, {4100, n, h2}};
    std::vector<GroupRange> plain = scaled;
    for (auto& g : scaled) g.hyper.grad_scale = scale;
    zt::optim::OptimizerSpec spec;
    spec.type = zt::optim::optimizer_kind(c.type);
    spec.simd = c.simd;
    spec.adamw_mode = adamw;
    auto a = zt::optim::make_shard_optimizer(spec);
    auto b = zt::optim::make_shard_optimizer(spec);
    torch::Tensor pa = torch::randn({n}), pb = pa.clone();
    torch::Tensor ha = torch::zeros({n}, torch::kBFloat16), hb = ha.clone();
    for (int s = 0; s < 4; ++s) {
      const torch::Tensor g = torch::randn({n}) * 3;
      const torch::Tensor g_before = g.clone();
      a->step(pa, g, scaled, &ha);
      EXPECT_TRUE(torch::equal(g, g_before)) << c.type << ": the gradient was written";
      b->step(pb, g.mul(static_cast<double>(static_cast<float>(scale))), plain, &hb);
    }
    EXPECT_TRUE(torch::equal(pa, pb)) << c.type << "/" << c.simd << " adamw " << adamw;
    EXPECT_TRUE(torch::equal(ha, hb)) << c.type << "/" << c.simd << " adamw " << adamw;
    // And the factor acts: a step without it leaves other parameters or state (Lion's update is
    // the sign of a scale-invariant sum, so only its momentum shows the factor).
    auto u = zt::optim::make_shard_optimizer(spec);
    auto w = zt::optim::make_shard_optimizer(spec);
    torch::Tensor pu = torch::randn({n});
    torch::Tensor pv = pu.clone();
    const torch::Tensor g = torch::randn({n});
    u->step(pu, g, scaled);
    w->step(pv, g, plain);
    bool differs = !torch::equal(pu, pv);
    for (const auto& [key, value] : u->state_dict()) {
      differs = differs || !torch::equal(value, w->state_dict().at(key));
    }
    EXPECT_TRUE(differs) << c.type << ": grad_scale had no effect";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Types, GradScale,
    testing::Values(GradScaleCase{"Adam", "auto"}, GradScaleCase{"AdamW", "auto"},
                    GradScaleCase{"SGD", "auto"}, GradScaleCase{"Lion", "auto"},
                    GradScaleCase{"Lamb", "auto"}, GradScaleCase{"CpuAdam", "scalar"},
                    GradScaleCase{"CpuAdam", "avx2"}, GradScaleCase{"CpuAdam", "avx512"},
                    GradScaleCase{"Adam8bit", "scalar"}, GradScaleCase{"Adam8bit", "avx2"},
                    GradScaleCase{"Adam8bit", "avx512"}),
    [](const testing::TestParamInfo<GradScaleCase>& i) {
      return i.param.type + "_" + i.param.simd;
    });

TEST(ShardOptimizer, StateIsLazyAndSized) {
  auto opt = zt::optim::make_shard_optimizer({});
  EXPECT_EQ(opt->name(), "AdamW");
  EXPECT_EQ(opt->state_bytes(), 0);
  torch::Tensor p = torch::zeros({100});
  opt->step(p, torch::ones({100}), {{0, 100, {}}});
  EXPECT_EQ(opt->state_bytes(), 2 * 100 * 4);
}

TEST(ShardOptimizer, RejectsBadArguments) {
  auto opt = zt::optim::make_shard_optimizer({});
  torch::Tensor p = torch::zeros({100});
  EXPECT_THROW(opt->step(p, torch::ones({99}), {{0, 100, {}}}), zt::Error);
  EXPECT_THROW(opt->step(p, torch::ones({100}), {{0, 101, {}}}), zt::Error);
  EXPECT_THROW(opt->step(p, torch::ones({100}), {{0, 50, {}}, {40, 60, {}}}), zt::Error);
  GroupHyper bad;
  bad.beta1 = 1.0;
  EXPECT_THROW(opt->step(p, torch::ones({100}), {{0, 100, bad}}), zt::Error);
  torch::Tensor d = torch::zeros({100}, torch::kDouble);
  EXPECT_THROW(opt->step(d, torch::ones({100}), {{0, 100, {}}}), zt::Error);
  try {
    zt::optim::make_shard_optimizer(spec_of("Adamax"));
    FAIL() << "unknown type accepted";
  } catch (const zt::Error& e) {
    EXPECT_NE(e.message().find("Adamax"), std::string::npos);
  }
}

// The one place a kind meets a device: Adam and AdamW step a host master with the fused CpuAdam
// pass (weight decay decoupled only for AdamW); every other kind is kept, and names round-trip.
TEST(ShardOptimizer, ResolvesAdamForTheMastersDevice) {
  using zt::optim::OptimizerKind;
  const c10::Device host(c10::kCPU);
  zt::optim::OptimizerSpec adam = spec_of("Adam");
  adam.adamw_mode = true;  // the kind decides, not a stale flag
  const zt::optim::OptimizerSpec a = zt::optim::resolve_for_device(adam, host);
  EXPECT_EQ(a.type, OptimizerKind::kCpuAdam);
  EXPECT_FALSE(a.adamw_mode);
  const zt::optim::OptimizerSpec w = zt::optim::resolve_for_device(spec_of("AdamW"), host);
  EXPECT_EQ(w.type, OptimizerKind::kCpuAdam);
  EXPECT_TRUE(w.adamw_mode);
  for (const char* kept : {"SGD", "Lion", "Lamb", "Adam8bit", "CpuAdam"}) {
    EXPECT_EQ(zt::optim::resolve_for_device(spec_of(kept), host).type,
              zt::optim::optimizer_kind(kept))
        << kept;
    EXPECT_EQ(std::string(zt::optim::optimizer_name(zt::optim::optimizer_kind(kept))), kept);
  }
}

}  // namespace
