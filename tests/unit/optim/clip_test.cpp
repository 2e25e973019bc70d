// Global-norm clipping helpers against torch::nn::utils::clip_grad_norm_.
#include "optim/clip.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

TEST(Clip, CoefficientFollowsTorch) {
  EXPECT_DOUBLE_EQ(zt::optim::clip_coefficient(10.0, 1.0), 1.0 / (10.0 + 1e-6));
  EXPECT_DOUBLE_EQ(zt::optim::clip_coefficient(0.5, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(zt::optim::clip_coefficient(0.0, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(zt::optim::clip_coefficient(100.0, 0.0), 1.0);  // clipping off
  EXPECT_EQ(zt::optim::clip_coefficient(std::numeric_limits<double>::infinity(), 1.0), 0.0);
  EXPECT_TRUE(std::isnan(zt::optim::clip_coefficient(std::nan(""), 1.0)));
}

TEST(Clip, ShardedNormMatchesClipGradNorm) {
  torch::manual_seed(1);
  torch::Tensor flat = torch::randn({1000003}) * 3;
  // Reference: torch over two "parameters".
  torch::Tensor a = flat.narrow(0, 0, 400000).clone().requires_grad_(true);
  torch::Tensor b = flat.narrow(0, 400000, 600003).clone().requires_grad_(true);
  a.mutable_grad() = a.detach().clone();
  b.mutable_grad() = b.detach().clone();
  const double ref_norm = torch::nn::utils::clip_grad_norm_({a, b}, 5.0);
  // Ours: three uneven "rank" shards, sums added, sqrt, coefficient.
  double total = 0;
  for (auto [off, n] :
       {std::pair<int64_t, int64_t>{0, 333334}, {333334, 333334}, {666668, 333335}}) {
    total += zt::optim::sum_of_squares(flat.narrow(0, off, n));
  }
  const double norm = std::sqrt(total);
  EXPECT_NEAR(norm, ref_norm, 1e-5 * ref_norm);
  // torch accumulates the norm in fp32: agreement to ~1e-6 relative, hence rtol 1e-5 below.
  const double coef = zt::optim::clip_coefficient(norm, 5.0);
  torch::Tensor clipped = flat * coef;
  EXPECT_TRUE(torch::allclose(clipped.narrow(0, 0, 400000), a.grad(), 1e-5, 1e-9));
  EXPECT_TRUE(torch::allclose(clipped.narrow(0, 400000, 600003), b.grad(), 1e-5, 1e-9));
}

TEST(Clip, SumOfSquaresIsExactForSmallIntegersAndHandlesHalf) {
  torch::Tensor x = torch::arange(1, 1001, torch::kFloat);
  EXPECT_DOUBLE_EQ(zt::optim::sum_of_squares(x), 1000.0 * 1001 * 2001 / 6);
  EXPECT_DOUBLE_EQ(zt::optim::sum_of_squares(x.to(torch::kBFloat16).narrow(0, 0, 10)), 385.0);
  EXPECT_DOUBLE_EQ(zt::optim::sum_of_squares(torch::empty({0})), 0.0);
}

}  // namespace
