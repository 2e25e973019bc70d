// Muon on a flat shard (optim/muon.h): the Newton-Schulz iteration against the closed form on the
// singular values, the two iterations against each other, the parameter split, and one and two
// steps of each half against the formulas written out by hand.

#include "optim/muon.h"

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace zt::optim {
namespace {

// The quintic applied `steps` times to x (a singular value of the normalised matrix).
double quintic(double x, int steps) {
  for (int i = 0; i < steps; ++i) x = kNsA * x + kNsB * x * x * x + kNsC * x * x * x * x * x;
  return x;
}

// G = U diag(s) V^T with random orthonormal U (rows x k) and V (cols x k), k = min(rows, cols);
// its orthogonalisation is U diag(quintic(s / (||s|| + 1e-7))) V^T times the aspect scale.
struct KnownSvd {
  torch::Tensor g, expected;
};
KnownSvd known_svd(int64_t rows, int64_t cols, uint64_t seed) {
  torch::manual_seed(seed);
  const int64_t k = std::min(rows, cols);
  torch::Tensor u = std::get<0>(torch::linalg_qr(torch::randn({rows, k}, torch::kDouble)));
  torch::Tensor v = std::get<0>(torch::linalg_qr(torch::randn({cols, k}, torch::kDouble)));
  torch::Tensor s = torch::linspace(0.2, 2.0, k, torch::kDouble);
  torch::Tensor x = s / (s.norm() + 1e-7);
  std::vector<double> f;
  for (int64_t i = 0; i < k; ++i) f.push_back(quintic(x[i].item<double>(), kMuonNsSteps));
  torch::Tensor fs = torch::tensor(f, torch::kDouble);
  const double aspect = rows > cols ? std::sqrt(static_cast<double>(rows) / cols) : 1.0;
  return {(u * s).matmul(v.t()).to(torch::kFloat),
          ((u * fs).matmul(v.t()) * aspect).to(torch::kFloat)};
}

class MuonNewtonSchulz : public ::testing::TestWithParam<std::tuple<int64_t, int64_t>> {};

TEST_P(MuonNewtonSchulz, MatchesTheQuinticOnSingularValues) {
  const auto [rows, cols] = GetParam();
  const KnownSvd c = known_svd(rows, cols, 3);
  for (NsMethod method : {NsMethod::kGram, NsMethod::kStandard}) {
    torch::Tensor o = orthogonalize(c.g, method, kMuonNsSteps, torch::kFloat);
    ASSERT_EQ(o.sizes(), c.g.sizes());
    EXPECT_TRUE(torch::allclose(o, c.expected, 1e-4, 2e-5))
        << ns_method_name(method) << " " << rows << "x" << cols << " differs by "
        << (o - c.expected).abs().max().item<double>();
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MuonNewtonSchulz,
                         ::testing::Values(std::make_tuple(6, 3), std::make_tuple(3, 7),
                                           std::make_tuple(5, 5), std::make_tuple(1, 9),
                                           std::make_tuple(16, 64)));

TEST(MuonNewtonSchulz, GramAndStandardAgreeInFp32) {
  torch::manual_seed(5);
  for (auto shape : {std::vector<int64_t>{12, 40}, {40, 12}, {3, 4, 9}}) {
    torch::Tensor g = torch::randn(shape);
    torch::Tensor a = orthogonalize(g, NsMethod::kGram, kMuonNsSteps, torch::kFloat);
    torch::Tensor b = orthogonalize(g, NsMethod::kStandard, kMuonNsSteps, torch::kFloat);
    EXPECT_TRUE(torch::allclose(a, b, 1e-4, 1e-5)) << (a - b).abs().max().item<double>();
  }
}

TEST(MuonNewtonSchulz, ConvolutionFilterIsOneMatrix) {
  torch::manual_seed(6);
  torch::Tensor w = torch::randn({4, 2, 3, 3});
  torch::Tensor o = orthogonalize(w, NsMethod::kGram, kMuonNsSteps, torch::kFloat);
  // (4, 18) orthogonalised whole; the aspect scale reads the last two dims (3 x 3: none).
  torch::Tensor flat =
      orthogonalize(w.reshape({4, 18}), NsMethod::kGram, kMuonNsSteps, torch::kFloat);
  EXPECT_TRUE(torch::equal(o.reshape({4, 18}), flat));
}

TEST(MuonNewtonSchulz, ComputeDtypeIsDeepSpeeds) {
  EXPECT_EQ(ns_compute_dtype(NsMethod::kStandard, torch::kCPU), torch::kBFloat16);
  const at::ScalarType gram = ns_compute_dtype(NsMethod::kGram, torch::kCPU);
  EXPECT_TRUE(gram == torch::kFloat || gram == torch::kHalf);
  EXPECT_EQ(ns_compute_dtype(NsMethod::kGram, c10::Device(c10::kCUDA, 0)), torch::kHalf);
  EXPECT_EQ(ns_method_from_name("standard"), NsMethod::kStandard);
  EXPECT_THROW(ns_method_from_name("svd"), std::exception);
}

TEST(MuonNewtonSchulz, EnvironmentPinsTheComputeDtype) {
  ::setenv("ZT_MUON_NS_DTYPE", "fp32", 1);
  EXPECT_EQ(ns_compute_dtype(NsMethod::kStandard, torch::kCPU), torch::kFloat);
  EXPECT_EQ(ns_compute_dtype(NsMethod::kGram, c10::Device(c10::kCUDA, 0)), torch::kFloat);
  ::setenv("ZT_MUON_NS_DTYPE", "bf16", 1);
  EXPECT_EQ(ns_compute_dtype(NsMethod::kGram, torch::kCPU), torch::kBFloat16);
  ::setenv("ZT_MUON_NS_DTYPE", "fp8", 1);
  try {
    ns_compute_dtype(NsMethod::kGram, torch::kCPU);
    ADD_FAILURE() << "fp8 accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("ZT_MUON_NS_DTYPE"), std::string::npos) << e.what();
  }
  ::setenv("ZT_MUON_NS_DTYPE", "auto", 1);
  EXPECT_EQ(ns_compute_dtype(NsMethod::kStandard, torch::kCPU), torch::kBFloat16);
  ::unsetenv("ZT_MUON_NS_DTYPE");
}

TEST(MuonSplit, MatricesButNotEmbeddingsHeadsOrVectors) {
  EXPECT_TRUE(uses_muon("blocks.0.attn.qkv.weight", {36, 12}));
  EXPECT_TRUE(uses_muon("conv.weight", {4, 2, 3, 3}));
  EXPECT_FALSE(uses_muon("blocks.0.attn.qkv.bias", {36}));
  EXPECT_FALSE(uses_muon("model.embed_tokens.weight", {100, 12}));
  EXPECT_FALSE(uses_muon("Word_Embeddings.weight", {100, 12}));  // case-insensitive
  EXPECT_FALSE(uses_muon("lm_head.weight", {100, 12}));
  // DeepSpeed's rule is by name: GPT-2's wte has no "embed" in it, so Muon steps it.
  EXPECT_TRUE(uses_muon("transformer.wte.weight", {100, 12}));
}

TEST(MuonFoldMomentum, MomentumAndNesterovBlend) {
  OptimizerSpec spec;
  spec.type = OptimizerKind::kMuon;
  Muon muon(spec);
  torch::Tensor g = torch::tensor({1.0f, -2.0f, 4.0f});
  const double beta = 0.9;
  torch::Tensor s = g.clone();
  muon.fold_momentum(s.narrow(0, 1, 2), 5, 2, beta, torch::kCPU);
  // m = 0.1 g; blend = g + 0.9 (m - g) = g (1 - 0.9 * 0.9) = 0.19 g, for the elements 1, 2 only.
  EXPECT_FLOAT_EQ(s[0].item<float>(), 1.0f);
  EXPECT_NEAR(s[1].item<float>(), -2.0 * 0.19, 1e-6);
  EXPECT_NEAR(s[2].item<float>(), 4.0 * 0.19, 1e-6);
  torch::Tensor m = muon.state_dict().at("exp_avg");
  ASSERT_EQ(m.numel(), 5);
  EXPECT_NEAR(m[2].item<float>(), -0.2, 1e-7);
  EXPECT_NEAR(m[3].item<float>(), 0.4, 1e-7);
  EXPECT_EQ(m[0].item<float>(), 0.0f);
  // Second fold: m = 0.9 m + 0.1 g.
  torch::Tensor s2 = g.narrow(0, 1, 2).clone();
  muon.fold_momentum(s2, 5, 2, beta, torch::kCPU);
  EXPECT_NEAR(muon.state_dict().at("exp_avg")[2].item<float>(), -0.2 * 0.9 - 0.2, 1e-6);
}

TEST(MuonStep, MuonRangeAppliesDecayAndUpdate) {
  OptimizerSpec spec;
  spec.type = OptimizerKind::kMuon;
  Muon muon(spec);
  torch::Tensor p = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f});
  torch::Tensor o = torch::tensor({0.5f, -0.5f, 0.25f, 9.0f});
  GroupRange r{0, 3, {}};
  r.hyper.muon = true;
  r.hyper.lr = 0.1;
  r.hyper.weight_decay = 0.2;
  r.hyper.grad_scale = 0.5;  // the clipping factor
  muon.step(p, o, {r});
  for (int i = 0; i < 3; ++i) {
    const double want = (i + 1.0) * (1 - 0.1 * 0.2) - 0.1 * 0.5 * o[i].item<double>();
    EXPECT_NEAR(p[i].item<float>(), want, 1e-6) << i;
  }
  EXPECT_EQ(p[3].item<float>(), 4.0f);  // outside every group
}

// DeepSpeed's adam_update, two steps in double.
TEST(MuonStep, AuxAdamIsDeepSpeedsFormula) {
  for (bool adamw : {true, false}) {
    OptimizerSpec spec;
    spec.type = OptimizerKind::kMuon;
    spec.adamw_mode = adamw;
    Muon muon(spec);
    torch::Tensor p = torch::tensor({0.5f, -1.0f});
    GroupRange r{0, 2, {}};
    r.hyper.lr = 0.01;
    r.hyper.weight_decay = 0.1;
    r.hyper.beta1 = 0.8;
    r.hyper.beta2 = 0.95;
    r.hyper.eps = 1e-10;
    std::vector<double> want = {0.5, -1.0}, m = {0, 0}, v = {0, 0};
    const std::vector<std::vector<double>> grads = {{0.3, -0.7}, {-0.1, 0.2}};
    for (int t = 1; t <= 2; ++t) {
      torch::Tensor g =
          torch::tensor({static_cast<float>(grads[t - 1][0]), static_cast<float>(grads[t - 1][1])});
      muon.step(p, g, {r});
      for (int i = 0; i < 2; ++i) {
        double gi = grads[t - 1][i];
        if (!adamw) gi += 0.1 * want[i];
        m[i] = m[i] + (gi - m[i]) * (1 - 0.8);
        v[i] = v[i] + (gi * gi - v[i]) * (1 - 0.95);
        const double u =
            (m[i] / (1 - std::pow(0.8, t))) / (std::sqrt(v[i] / (1 - std::pow(0.95, t))) + 1e-10);
        if (adamw) want[i] *= 1 - 0.01 * 0.1;
        want[i] -= 0.01 * u;
        EXPECT_NEAR(p[i].item<float>(), want[i], 2e-6) << "adamw " << adamw << " step " << t;
      }
    }
    EXPECT_EQ(muon.step_count(), 2);
  }
}

TEST(MuonStep, StateRoundTrips) {
  OptimizerSpec spec;
  spec.type = OptimizerKind::kMuon;
  auto a = make_shard_optimizer(spec);
  EXPECT_EQ(a->name(), "Muon");
  torch::Tensor p = torch::ones({4}), g = torch::full({4}, 0.5f);
  GroupRange r{0, 4, {}};
  a->step(p, g, {r});
  EXPECT_EQ(a->state_bytes(), 32);
  auto b = make_shard_optimizer(spec);
  b->load_state_dict(a->state_dict());
  torch::Tensor pa = p.clone(), pb = p.clone();
  a->step(pa, g, {r});
  b->step(pb, g, {r});
  EXPECT_TRUE(torch::equal(pa, pb));
  EXPECT_EQ(optimizer_kind("Muon"), OptimizerKind::kMuon);
}

}  // namespace
}  // namespace zt::optim
