// One Adam formula (optim/adam_formula.h) behind CpuAdam, Adam8bit and the CUDA kernels, checked
// on the CPU:
//  - adam_constants() rounds each constant from double once (not 1 - beta2 in float);
//  - the launch structs FusedAdam and Adam8bit build on the host carry exactly those constants;
//  - the CUDA fused kernel, emulated on the host with the same adam_update<true> and the launch
//    structs FusedAdam built, gives CpuAdam's AVX2/AVX-512 results bit for bit, and the unfused
//    form gives CpuAdam's scalar and Adam8bit's results bit for bit. The kernels compile that same
//    header for the device with IEEE-rounded intrinsics, so this is what the GPU must reproduce.
#include "optim/adam_formula.h"

#include <cmath>
#include <cstring>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/error.h"
#include "optim/adam8bit.h"
#include "optim/cpu_adam.h"
#include "optim/fused_adam.h"

namespace {

using zt::optim::AdamConstants;
using zt::optim::GroupHyper;
using zt::optim::GroupRange;
using zt::optim::SimdPath;

bool same_bits(const AdamConstants& a, const AdamConstants& b) {
  return std::memcmp(&a, &b, sizeof(AdamConstants)) == 0;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

GroupHyper hyper_a() {
  GroupHyper h;
  h.lr = 1e-2;
  h.weight_decay = 0.1;
  return h;  // betas 0.9 / 0.999, eps 1e-8
}

GroupHyper hyper_b() {
  GroupHyper h;
  h.lr = 3e-3;
  h.beta1 = 0.8;
  h.beta2 = 0.95;
  h.eps = 1e-6;
  return h;
}

TEST(AdamConstants, EachIsRoundedOnceFromDouble) {
  const GroupHyper h = hyper_a();
  for (int64_t t : {1, 2, 7, 1000}) {
    const AdamConstants c = zt::optim::adam_constants(h, /*adamw_mode=*/true, t);
    EXPECT_EQ(bits(c.one_minus_beta1), bits(static_cast<float>(1.0 - 0.9)));
    EXPECT_EQ(bits(c.one_minus_beta2), bits(static_cast<float>(1.0 - 0.999)));
    const double td = static_cast<double>(t);
    EXPECT_EQ(bits(c.neg_step_size), bits(static_cast<float>(-1e-2 / (1.0 - std::pow(0.9, td)))));
    EXPECT_EQ(bits(c.inv_sqrt_bc2),
              bits(static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(0.999, td)))));
    EXPECT_EQ(bits(c.decay_factor), bits(static_cast<float>(1.0 - 1e-2 * 0.1)));
    EXPECT_EQ(c.l2_weight_decay, 0.0f);
  }
  // The float-side derivation differs (why it matters): 1.3e-5 relative for beta2 = 0.999.
  EXPECT_NE(bits(static_cast<float>(1.0 - 0.999)), bits(1.0f - static_cast<float>(0.999)));
  const AdamConstants l2 = zt::optim::adam_constants(h, /*adamw_mode=*/false, 1);
  EXPECT_EQ(l2.decay_factor, 1.0f);
  EXPECT_EQ(bits(l2.l2_weight_decay), bits(0.1f));
  EXPECT_THROW(zt::optim::adam_constants(h, true, 0), zt::Error);
}

// 70 groups (two fused launches of at most 64), some empty, gaps between them and at offset 0.
std::vector<GroupRange> many_groups(int64_t* numel) {
  std::vector<GroupRange> groups;
  int64_t off = 3;
  for (int i = 0; i < 72; ++i) {
    const int64_t len = i % 17 == 5 ? 0 : 1 + (i * 37) % 900;
    groups.push_back({off, off + len, i % 2 ? hyper_a() : hyper_b()});
    off += len + (i % 3);
  }
  *numel = off + 5;
  return groups;
}

TEST(AdamConstants, LaunchStructsCarryThemBitForBit) {
  int64_t n = 0;
  const auto groups = many_groups(&n);
  for (bool adamw : {true, false}) {
    const int64_t t = 3;
    const auto launches = zt::optim::fused_adam_launches(groups, adamw, t);
    std::vector<const zt::optim::FusedAdamGroup*> fused;
    for (const auto& l : launches) {
      EXPECT_LE(l.num_groups, zt::optim::kFusedAdamMaxGroups);
      EXPECT_EQ(l.param, nullptr);
      for (int i = 0; i < l.num_groups; ++i) fused.push_back(&l.groups[i]);
    }
    EXPECT_EQ(launches.size(), 2u);
    const auto eight = zt::optim::adam8bit_groups(groups, adamw, t);
    size_t k = 0;
    for (const GroupRange& g : groups) {
      if (g.begin == g.end) continue;
      ASSERT_LT(k, fused.size());
      const AdamConstants want = zt::optim::adam_constants(g.hyper, adamw, t);
      EXPECT_EQ(fused[k]->begin, g.begin);
      EXPECT_EQ(fused[k]->end, g.end);
      EXPECT_TRUE(same_bits(fused[k]->c, want)) << "fused launch, group " << k;
      EXPECT_EQ(eight[k].begin, g.begin);
      EXPECT_TRUE(same_bits(eight[k].c, want)) << "8-bit groups, group " << k;
      ++k;
    }
    EXPECT_EQ(k, fused.size());
    EXPECT_EQ(k, eight.size());
  }
}

// What the CUDA kernels compute, run on the host: the launch structs' groups through
// adam_update<kFused>, then round-to-nearest-even to bf16.
template <bool kFused>
void emulate(const std::vector<zt::optim::FusedAdamLaunch>& launches, torch::Tensor& p,
             const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v, torch::Tensor& half) {
  float* pp = p.data_ptr<float>();
  const float* gp = g.data_ptr<float>();
  float* mp = m.data_ptr<float>();
  float* vp = v.data_ptr<float>();
  auto* hp = half.data_ptr<at::BFloat16>();
  for (const auto& l : launches) {
    for (int k = 0; k < l.num_groups; ++k) {
      const auto& gr = l.groups[k];
      for (int64_t i = gr.begin; i < gr.end; ++i) {
        zt::optim::adam_update<kFused>(gr.c, pp[i], gp[i], mp[i], vp[i]);
        hp[i] = at::BFloat16(pp[i]);
      }
    }
  }
}

class OneFormula : public testing::TestWithParam<SimdPath> {};

// CpuAdam's path against the emulated kernel over 5 steps: param, m, v and the bf16 copy equal
// bit for bit (fused rounding for AVX2/AVX-512, unfused for scalar), padding untouched.
TEST_P(OneFormula, CpuAdamEqualsTheKernelsFormulaBitForBit) {
  if (!zt::optim::simd_path_supported(GetParam())) GTEST_SKIP() << "CPU lacks this path";
  const bool fused = GetParam() != SimdPath::kScalar;
  int64_t n = 0;
  const auto groups = many_groups(&n);
  for (bool adamw : {true, false}) {
    torch::manual_seed(21);
    zt::optim::OptimizerSpec spec;
    spec.type = zt::optim::OptimizerKind::kCpuAdam;
    spec.adamw_mode = adamw;
    spec.simd = zt::optim::simd_path_name(GetParam());
    spec.tile = 97;  // many tiles: every SIMD tail length shows up
    auto cpu = zt::optim::make_shard_optimizer(spec);
    torch::Tensor start = torch::randn({n});
    torch::Tensor p = start.clone(), half = torch::zeros({n}, torch::kBFloat16);
    torch::Tensor ep = start.clone(), em = torch::zeros({n}), ev = torch::zeros({n});
    torch::Tensor ehalf = torch::zeros({n}, torch::kBFloat16);
    for (int64_t t = 1; t <= 5; ++t) {
      torch::Tensor g = torch::randn({n}) * (t % 2 ? 1e-3 : 10.0);
      cpu->step(p, g, groups, &half);
      const auto launches = zt::optim::fused_adam_launches(groups, adamw, t);
      if (fused) {
        emulate<true>(launches, ep, g, em, ev, ehalf);
      } else {
        emulate<false>(launches, ep, g, em, ev, ehalf);
      }
    }
    auto state = cpu->state_dict();
    const std::string what = std::string(adamw ? "AdamW" : "Adam") + " " + spec.simd;
    EXPECT_TRUE(torch::equal(p, ep)) << what << ": param";
    EXPECT_TRUE(torch::equal(state.at("exp_avg"), em)) << what << ": exp_avg";
    EXPECT_TRUE(torch::equal(state.at("exp_avg_sq"), ev)) << what << ": exp_avg_sq";
    EXPECT_TRUE(torch::equal(half, ehalf)) << what << ": bf16 copy";
    EXPECT_TRUE(torch::equal(p.narrow(0, 0, 3), start.narrow(0, 0, 3))) << what << ": padding";
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, OneFormula,
                         testing::Values(SimdPath::kScalar, SimdPath::kAvx2, SimdPath::kAvx512),
                         [](const testing::TestParamInfo<SimdPath>& i) {
                           return std::string(zt::optim::simd_path_name(i.param));
                         });

// Adam8bit's CPU pass with fp32 state (a shard under min_8bit_size) is the unfused formula bit
// for bit; its quantized pass runs the same adam_update<false> on dequantized moments.
TEST(OneFormula, Adam8bitFp32StateEqualsTheFormulaBitForBit) {
  int64_t n = 0;
  const auto groups = many_groups(&n);
  ASSERT_LT(n, 1 << 16);
  torch::manual_seed(22);
  zt::optim::OptimizerSpec spec;
  spec.type = zt::optim::OptimizerKind::kAdam8bit;
  spec.min_8bit_size = 1 << 16;  // fp32 state
  zt::optim::Adam8bit opt(spec);
  torch::Tensor start = torch::randn({n});
  torch::Tensor p = start.clone(), half = torch::zeros({n}, torch::kBFloat16);
  torch::Tensor ep = start.clone(), em = torch::zeros({n}), ev = torch::zeros({n});
  torch::Tensor ehalf = torch::zeros({n}, torch::kBFloat16);
  for (int64_t t = 1; t <= 5; ++t) {
    torch::Tensor g = torch::randn({n});
    opt.step(p, g, groups, &half);
    emulate<false>(zt::optim::fused_adam_launches(groups, true, t), ep, g, em, ev, ehalf);
  }
  ASSERT_FALSE(opt.quantized());
  auto [m, v] = opt.dequantized_state();
  EXPECT_TRUE(torch::equal(p, ep));
  EXPECT_TRUE(torch::equal(m, em));
  EXPECT_TRUE(torch::equal(v, ev));
  EXPECT_TRUE(torch::equal(half, ehalf));
}

}  // namespace
