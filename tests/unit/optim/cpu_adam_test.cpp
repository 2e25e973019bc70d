// CpuAdam on every SIMD path this CPU has (plus the portable one) against torch::optim::Adam and
// AdamW, and its one-pass fp16/bf16 copy against LibTorch's own conversion, bit for bit.
#include "optim/cpu_adam.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/error.h"
#include "optim/intra_op.h"

namespace {

using zt::optim::GroupHyper;
using zt::optim::GroupRange;
using zt::optim::SimdPath;

constexpr int kAdamSteps = 20;

std::string path_name(const testing::TestParamInfo<SimdPath>& info) {
  return zt::optim::simd_path_name(info.param);
}

class CpuAdamPath : public testing::TestWithParam<SimdPath> {
 protected:
  void SetUp() override {
    if (!zt::optim::simd_path_supported(GetParam())) {
      GTEST_SKIP() << "this CPU lacks the " << zt::optim::simd_path_name(GetParam()) << " path";
    }
  }
  std::unique_ptr<zt::optim::ShardOptimizer> make(bool adamw_mode, int64_t tile = 1 << 16) {
    zt::optim::OptimizerSpec spec;
    spec.type = zt::optim::OptimizerKind::kCpuAdam;
    spec.adamw_mode = adamw_mode;
    spec.simd = zt::optim::simd_path_name(GetParam());
    spec.tile = tile;
    return zt::optim::make_shard_optimizer(spec);
  }
};

// Runs CpuAdam and torch::optim::<Opt> side by side on three groups (sizes chosen so every
// SIMD tail length shows up) over kAdamSteps random gradients; returns the worst relative error.
template <typename Options, typename Opt>
void compare_with_torch(zt::optim::ShardOptimizer& opt, torch::ScalarType half_dtype) {
  torch::manual_seed(11);
  GroupHyper a;
  a.lr = 1e-2;
  a.weight_decay = 0.1;
  GroupHyper b;
  b.lr = 3e-3;
  b.beta1 = 0.8;
  b.beta2 = 0.95;
  b.eps = 1e-6;
  GroupHyper c;
  c.lr = 5e-2;
  c.weight_decay = 0.01;
  std::vector<GroupRange> groups{
      {1, 1 + 100003, a}, {100010, 100010 + 15, b}, {100030, 100030 + 70001, c}};
  const int64_t n = 170040;
  torch::Tensor master = torch::randn({n});
  std::vector<torch::Tensor> ref;
  std::vector<torch::optim::OptimizerParamGroup> pg;
  for (const GroupRange& g : groups) {
    ref.push_back(master.narrow(0, g.begin, g.end - g.begin).clone().requires_grad_(true));
    auto o = std::make_unique<Options>(g.hyper.lr);
    o->betas({g.hyper.beta1, g.hyper.beta2}).eps(g.hyper.eps).weight_decay(g.hyper.weight_decay);
    pg.emplace_back(std::vector<torch::Tensor>{ref.back()}, std::move(o));
  }
  Opt ref_opt(pg, Options(1e-3));
  torch::Tensor half = torch::zeros({n}, half_dtype);
  for (int s = 0; s < kAdamSteps; ++s) {
    torch::Tensor grad = torch::randn({n}) * (s % 2 ? 1e-3 : 10.0);
    for (size_t i = 0; i < ref.size(); ++i) {
      ref[i].mutable_grad() = grad.narrow(0, groups[i].begin, groups[i].end - groups[i].begin);
    }
    ref_opt.step();
    opt.step(master, grad, groups, &half);
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    torch::Tensor mine = master.narrow(0, groups[i].begin, groups[i].end - groups[i].begin);
    torch::Tensor want = ref[i].detach();
    // Relative to the parameter's scale (element-wise relative error is meaningless for the
    // elements that cancel to nearly zero).
    const double scale = want.abs().max().item<double>();
    EXPECT_LT((mine - want).abs().max().item<double>() / scale, 1e-6) << "group " << i;
    EXPECT_TRUE(torch::equal(half.narrow(0, groups[i].begin, mine.numel()), mine.to(half_dtype)))
        << "half copy, group " << i;
  }
  EXPECT_EQ(half[0].item<float>(), 0.0f);  // padding untouched
  EXPECT_EQ(half[100005].item<float>(), 0.0f);
}

TEST_P(CpuAdamPath, AdamWMatchesTorch) {
  auto opt = make(/*adamw_mode=*/true);
  compare_with_torch<torch::optim::AdamWOptions, torch::optim::AdamW>(*opt, torch::kBFloat16);
}

TEST_P(CpuAdamPath, AdamL2MatchesTorch) {
  auto opt = make(/*adamw_mode=*/false, /*tile=*/4099);
  compare_with_torch<torch::optim::AdamOptions, torch::optim::Adam>(*opt, torch::kHalf);
}

// lr = 0 leaves p unchanged, so the half copy must equal LibTorch's conversion of p exactly,
// including rounding ties, subnormals, overflow to inf, and NaN.
TEST_P(CpuAdamPath, HalfCopyRoundsLikeTorch) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> special = {
      0.0f,   -0.0f,          1.0f,           65504.0f,   65519.0f,    65520.0f,      1e6f,
      -1e6f,  6.1035156e-05f, 6.0e-05f,       5.96e-08f,  2.98e-08f,   2.99e-08f,     1e-10f,
      -3e-7f, 1.00048828125f, 1.00146484375f, 1.0039062f, 1.01171875f, 3.3895314e38f, inf,
      -inf};
  torch::manual_seed(5);
  torch::Tensor p =
      torch::cat({torch::tensor(special),
                  torch::randn({4000}) * torch::pow(10.0, torch::randint(-9, 6, {4000})),
                  torch::randint(0, 1 << 30, {3000}, torch::kInt).view(torch::kFloat)});
  const int64_t n = p.numel();
  GroupHyper h;
  h.lr = 0;
  for (auto dtype : {torch::kHalf, torch::kBFloat16}) {
    auto opt = make(true);
    torch::Tensor master = p.clone();
    torch::Tensor half = torch::zeros({n}, dtype);
    opt->step(master, torch::zeros({n}), {{0, n, h}}, &half);
    torch::Tensor want = p.to(dtype);
    // NaN != NaN: compare NaN positions, then the rest bit-exactly.
    EXPECT_TRUE(torch::equal(half.isnan(), want.isnan())) << c10::toString(dtype);
    torch::Tensor ok = ~want.isnan();
    torch::Tensor bad = ok & (half.to(torch::kFloat) != want.to(torch::kFloat));
    EXPECT_EQ(bad.sum().item<int64_t>(), 0)
        << c10::toString(dtype) << ": first mismatches at input "
        << p.masked_select(bad).slice(0, 0, 4) << " got " << half.masked_select(bad).slice(0, 0, 4)
        << " want " << want.masked_select(bad).slice(0, 0, 4);
    EXPECT_TRUE(torch::equal(master.isnan(), p.isnan()));
  }
}

// A long range writes its half copy with non-temporal stores after a head that aligns it; the
// same update cut into short groups (same hyper-parameters, so the same constants) takes the
// ordinary stores. Both must give the same master, state and copy bit for bit, from a misaligned
// start and with a ragged end.
TEST_P(CpuAdamPath, LongRangesGiveTheSameBitsAsShortOnes) {
  torch::manual_seed(13);
  const int64_t n = 3 * (int64_t{1} << 16) + 77, begin = 3;
  GroupHyper h;
  h.lr = 1e-2;
  h.weight_decay = 0.1;
  std::vector<GroupRange> whole{{begin, n, h}}, pieces;
  for (int64_t b = begin; b < n; b += 5003) pieces.push_back({b, std::min(n, b + 5003), h});
  for (auto dtype : {torch::kBFloat16, torch::kHalf}) {
    auto long_opt = make(true), short_opt = make(true);
    torch::Tensor m_long = torch::randn({n}), m_short = m_long.clone();
    torch::Tensor h_long = torch::zeros({n}, dtype), h_short = torch::zeros({n}, dtype);
    for (int s = 0; s < 3; ++s) {
      const torch::Tensor grad = torch::randn({n});
      long_opt->step(m_long, grad, whole, &h_long);
      short_opt->step(m_short, grad, pieces, &h_short);
    }
    EXPECT_TRUE(torch::equal(m_long, m_short)) << c10::toString(dtype);
    EXPECT_TRUE(torch::equal(h_long, h_short)) << c10::toString(dtype);
    EXPECT_TRUE(torch::equal(h_long.narrow(0, begin, n - begin),
                             m_long.narrow(0, begin, n - begin).to(dtype)))
        << c10::toString(dtype);
    EXPECT_EQ(h_long.narrow(0, 0, begin).abs().sum().item<float>(), 0.0f);
    const auto s_long = long_opt->state_dict(), s_short = short_opt->state_dict();
    EXPECT_TRUE(torch::equal(s_long.at("exp_avg_sq"), s_short.at("exp_avg_sq")));
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, CpuAdamPath,
                         testing::Values(SimdPath::kScalar, SimdPath::kAvx2, SimdPath::kAvx512),
                         path_name);

TEST(CpuAdam, AutoPicksTheBestPathAndEnvOverridesIt) {
  unsetenv(zt::optim::kCpuAdamSimdEnv);
  EXPECT_EQ(zt::optim::parse_simd_path("auto"), zt::optim::best_simd_path());
  setenv(zt::optim::kCpuAdamSimdEnv, "scalar", 1);
  EXPECT_EQ(zt::optim::parse_simd_path("auto"), SimdPath::kScalar);
  setenv(zt::optim::kCpuAdamSimdEnv, "sse9", 1);
  EXPECT_THROW(zt::optim::parse_simd_path("auto"), zt::Error);
  unsetenv(zt::optim::kCpuAdamSimdEnv);
  EXPECT_THROW(zt::optim::parse_simd_path("neon"), zt::Error);
}

TEST(CpuAdam, StateDictIsAdamsAndResumesExactly) {
  torch::manual_seed(2);
  const int64_t n = 10000;
  GroupHyper h;
  h.weight_decay = 0.05;
  zt::optim::OptimizerSpec spec;
  spec.type = zt::optim::OptimizerKind::kCpuAdam;
  auto a = zt::optim::make_shard_optimizer(spec);
  torch::Tensor pa = torch::randn({n});
  std::vector<torch::Tensor> grads;
  for (int s = 0; s < 4; ++s) grads.push_back(torch::randn({n}));
  a->step(pa, grads[0], {{0, n, h}});
  a->step(pa, grads[1], {{0, n, h}});
  EXPECT_EQ(a->state_bytes(), 8 * n);
  auto b = zt::optim::make_shard_optimizer(spec);
  std::map<std::string, torch::Tensor> saved;
  for (auto& [k, v] : a->state_dict()) saved[k] = v.clone();
  b->load_state_dict(saved);
  torch::Tensor pb = pa.clone();
  for (int s = 2; s < 4; ++s) {
    a->step(pa, grads[s], {{0, n, h}});
    b->step(pb, grads[s], {{0, n, h}});
  }
  EXPECT_TRUE(torch::equal(pa, pb));
  EXPECT_EQ(b->step_count(), 4);
}

TEST(CpuAdam, RejectsCudaAndBadTile) {
  zt::optim::OptimizerSpec spec;
  spec.type = zt::optim::OptimizerKind::kCpuAdam;
  spec.tile = 0;
  EXPECT_THROW(zt::optim::make_shard_optimizer(spec), zt::Error);
}

}  // namespace

namespace {

// zt_optim's at::parallel_for loops (CpuAdam, Adam8bit, clipping) must run on the intra-op
// threads: compiled without OpenMP they silently run on one (scripts/cmake/ZtTorch.cmake).
TEST(IntraOp, OptimizerLoopsUseEveryIntraOpThread) {
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  EXPECT_EQ(zt::optim::intra_op_width(), 2);
  at::set_num_threads(1);
  EXPECT_EQ(zt::optim::intra_op_width(), 1);
  at::set_num_threads(before);
}

}  // namespace
