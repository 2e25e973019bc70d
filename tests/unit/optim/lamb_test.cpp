// Lamb against a reference written from DeepSpeed's FusedLamb kernel
// (csrc/lamb/fused_lamb_cuda_kernel.cu: part 1 moments, update and the two norms; part 3 the
// clamped trust ratio and the parameter update; fused_lamb_cuda: the bias-corrected step size),
// element by element in double over plain vectors.
#include "optim/lamb.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "base/error.h"

namespace zt::optim {
namespace {

struct RefGroup {
  std::vector<double> p, m, v;
  double lr, b1, b2, eps, wd;
};

struct RefOptions {
  double max_coeff = 10.0, min_coeff = 0.01;
  bool eps_inside_sqrt = false, bias_correction = true;
};

// One FusedLamb step of one parameter group (one flat tensor); returns the coefficient.
double ref_step(RefGroup& G, const std::vector<double>& g, int step, const RefOptions& o) {
  const size_t n = G.p.size();
  std::vector<double> update(n);
  double w_l2 = 0, u_l2 = 0;
  for (size_t j = 0; j < n; ++j) {
    G.m[j] = G.b1 * G.m[j] + (1 - G.b1) * g[j];
    G.v[j] = G.b2 * G.v[j] + (1 - G.b2) * g[j] * g[j];
    const double denom = o.eps_inside_sqrt ? std::sqrt(G.v[j] + G.eps) : std::sqrt(G.v[j]) + G.eps;
    update[j] = G.m[j] / denom + G.wd * G.p[j];
    u_l2 += update[j] * update[j];
    w_l2 += G.p[j] * G.p[j];
  }
  const double w = std::sqrt(w_l2), u = std::sqrt(u_l2);
  double coeff = 1.0;
  if (w != 0 && u != 0) {
    coeff = w / u;
    if (coeff > o.max_coeff) coeff = o.max_coeff;
    if (coeff < o.min_coeff) coeff = o.min_coeff;
  }
  double step_size = G.lr;
  if (o.bias_correction) {
    step_size = G.lr * std::sqrt(1 - std::pow(G.b2, step)) / (1 - std::pow(G.b1, step));
  }
  for (size_t j = 0; j < n; ++j) G.p[j] -= step_size * coeff * update[j];
  return coeff;
}

std::vector<double> to_vec(const at::Tensor& t) {
  at::Tensor c = t.to(at::kDouble).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

OptimizerSpec spec_of(const RefOptions& o) {
  OptimizerSpec s;
  s.type = zt::optim::OptimizerKind::kLamb;
  s.max_coeff = o.max_coeff;
  s.min_coeff = o.min_coeff;
  s.eps_inside_sqrt = o.eps_inside_sqrt;
  s.bias_correction = o.bias_correction;
  return s;
}

// Two groups with different hyper-parameters; the first is split in two ranges around the
// second (so grouping by hyper-parameters, not by range, is exercised), plus padding at the end.
void check_against_reference(const RefOptions& o, int steps) {
  at::manual_seed(3);
  const int64_t n = 40;
  at::Tensor master = at::randn({n}, at::kFloat) * 0.5;
  GroupHyper h1;
  h1.lr = 2e-2;
  h1.weight_decay = 0.01;
  h1.beta1 = 0.9;
  h1.beta2 = 0.999;
  h1.eps = 1e-6;
  GroupHyper h2 = h1;
  h2.lr = 5e-3;
  h2.weight_decay = 0.0;
  h2.beta1 = 0.8;
  h2.beta2 = 0.99;
  const std::vector<GroupRange> groups = {{0, 10, h1}, {10, 25, h2}, {25, 36, h1}};  // 36..40 pad
  const at::Tensor pad_before = master.narrow(0, 36, 4).clone();

  const std::vector<double> p0 = to_vec(master);
  RefGroup g1{{}, {}, {}, h1.lr, h1.beta1, h1.beta2, h1.eps, h1.weight_decay};
  RefGroup g2{{}, {}, {}, h2.lr, h2.beta1, h2.beta2, h2.eps, h2.weight_decay};
  for (int j = 0; j < 10; ++j) g1.p.push_back(p0[j]);
  for (int j = 25; j < 36; ++j) g1.p.push_back(p0[j]);
  for (int j = 10; j < 25; ++j) g2.p.push_back(p0[j]);
  g1.m.assign(g1.p.size(), 0);
  g1.v.assign(g1.p.size(), 0);
  g2.m.assign(g2.p.size(), 0);
  g2.v.assign(g2.p.size(), 0);

  auto opt = make_shard_optimizer(spec_of(o));
  ASSERT_EQ(opt->name(), "Lamb");
  for (int s = 1; s <= steps; ++s) {
    at::Tensor grad = at::randn({n}, at::kFloat);
    const std::vector<double> g = to_vec(grad);
    std::vector<double> gg1, gg2;
    for (int j = 0; j < 10; ++j) gg1.push_back(g[j]);
    for (int j = 25; j < 36; ++j) gg1.push_back(g[j]);
    for (int j = 10; j < 25; ++j) gg2.push_back(g[j]);
    const double c1 = ref_step(g1, gg1, s, o);
    const double c2 = ref_step(g2, gg2, s, o);
    opt->step(master, grad, groups);
    const auto& coeffs = static_cast<Lamb&>(*opt).last_coefficients();
    ASSERT_EQ(coeffs.size(), 2u);
    EXPECT_NEAR(coeffs[0], c1, 1e-5 * std::max(1.0, c1)) << "step " << s;
    EXPECT_NEAR(coeffs[1], c2, 1e-5 * std::max(1.0, c2)) << "step " << s;
  }
  const std::vector<double> p = to_vec(master);
  std::vector<double> expect(p.size());
  for (int j = 0; j < 10; ++j) expect[j] = g1.p[j];
  for (int j = 25; j < 36; ++j) expect[j] = g1.p[10 + j - 25];
  for (int j = 10; j < 25; ++j) expect[j] = g2.p[j - 10];
  for (int j = 0; j < 36; ++j) EXPECT_NEAR(p[j], expect[j], 2e-6) << "element " << j;
  EXPECT_TRUE(master.narrow(0, 36, 4).equal(pad_before)) << "padding must not move";
}

TEST(Lamb, MatchesFusedLambReference) {
  check_against_reference(RefOptions{}, 5);
}

TEST(Lamb, MatchesWithEpsInsideSqrtAndNoBiasCorrection) {
  RefOptions o;
  o.eps_inside_sqrt = true;
  o.bias_correction = false;
  check_against_reference(o, 4);
}

// A tight clamp makes the coefficient the bound itself on both sides.
TEST(Lamb, TrustRatioIsClampedByMaxCoeffAndMinCoeff) {
  RefOptions hi;
  hi.max_coeff = 0.3;  // ||p|| / ||update|| is about 1.3 for these weights: clamped to 0.3
  hi.min_coeff = 0.01;
  check_against_reference(hi, 2);
  RefOptions lo;
  lo.max_coeff = 50;
  lo.min_coeff = 40;  // raised to 40
  check_against_reference(lo, 2);

  GroupHyper h;
  h.lr = 1e-3;
  at::Tensor master = at::full({8}, 3.0f);  // ||p|| = 8.49, ||update|| ~ sqrt(8)
  at::Tensor grad = at::ones({8});
  OptimizerSpec s = spec_of(hi);
  Lamb opt(s);
  opt.step(master, grad, {{0, 8, h}});
  EXPECT_DOUBLE_EQ(opt.last_coefficients().at(0), 0.3);
}

TEST(Lamb, ZeroWeightsUseCoefficientOne) {
  GroupHyper h;
  h.lr = 1e-2;
  at::Tensor master = at::zeros({6});
  at::Tensor grad = at::ones({6});
  Lamb opt(spec_of(RefOptions{}));
  opt.step(master, grad, {{0, 6, h}});
  EXPECT_EQ(opt.last_coefficients().at(0), 1.0);
  // Step 1 with bias correction: update = m / (sqrt(v) + eps) with m = 0.1, v = 0.001 after
  // correction of the step size lr * sqrt(1 - b2) / (1 - b1).
  const double m = 0.1, v = 0.001;
  const double expect = -1e-2 * std::sqrt(1 - 0.999) / (1 - 0.9) * (m / (std::sqrt(v) + 1e-8));
  EXPECT_NEAR(master[0].item<double>(), expect, 1e-7);
}

TEST(Lamb, StateRoundTripsExactly) {
  GroupHyper h;
  h.lr = 1e-2;
  h.weight_decay = 0.1;
  at::manual_seed(5);
  at::Tensor a = at::randn({16});
  at::Tensor b = a.clone();
  Lamb x(spec_of(RefOptions{}));
  Lamb y(spec_of(RefOptions{}));
  x.step(a, at::randn({16}), {{0, 16, h}});
  b.copy_(a);
  y.load_state_dict(x.state_dict());
  EXPECT_EQ(y.step_count(), 1);
  at::Tensor g = at::randn({16});
  x.step(a, g, {{0, 16, h}});
  y.step(b, g, {{0, 16, h}});
  EXPECT_TRUE(a.equal(b));
  EXPECT_EQ(x.state_bytes(), 16 * 8);
}

TEST(Lamb, BadCoefficientsAreRejected) {
  RefOptions o;
  o.min_coeff = 2;
  o.max_coeff = 1;
  EXPECT_THROW(Lamb(spec_of(o)), zt::Error);
}

}  // namespace
}  // namespace zt::optim
