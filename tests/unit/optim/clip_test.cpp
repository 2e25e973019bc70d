// Global-norm clipping helpers against torch::nn::utils::clip_grad_norm_.
#include "optim/clip.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "optim/cpu_adam.h"
#include "optim/sum_squares_kernel.h"

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

// One summation order in every build (optim/sum_squares_kernel.h): the scalar, AVX2 and AVX-512
// loops return the same bits, and within a few ulps of a long double sum.
TEST(Clip, SumOfSquaresBuildsAgreeBitForBit) {
  torch::manual_seed(3);
  for (int64_t n : {0, 1, 15, 16, 17, 1000, 65536 + 37}) {
    const torch::Tensor x = torch::randn({n}) * 7;
    const float* p = x.data_ptr<float>();
    long double ref = 0;
    for (int64_t i = 0; i < n; ++i) ref += static_cast<long double>(p[i]) * p[i];
    const double s = zt::optim::kernels::sum_squares_scalar(p, n);
    EXPECT_NEAR(s, static_cast<double>(ref), 1e-13 * static_cast<double>(ref) + 1e-300) << n;
    if (zt::optim::simd_path_supported(zt::optim::SimdPath::kAvx2)) {
      EXPECT_EQ(zt::optim::kernels::sum_squares_avx2(p, n), s) << n;
    }
    if (zt::optim::simd_path_supported(zt::optim::SimdPath::kAvx512)) {
      EXPECT_EQ(zt::optim::kernels::sum_squares_avx512(p, n), s) << n;
    }
  }
  // Through the public function, every forced build gives the same total.
  const torch::Tensor big = torch::randn({1000003});
  const char* old = std::getenv(zt::optim::kCpuAdamSimdEnv);
  const std::string saved = old ? old : "";
  setenv(zt::optim::kCpuAdamSimdEnv, "scalar", 1);
  const double scalar_total = zt::optim::sum_of_squares(big);
  using zt::optim::SimdPath;
  for (const auto& [name, path] : {std::pair<const char*, SimdPath>{"avx2", SimdPath::kAvx2},
                                   std::pair<const char*, SimdPath>{"avx512", SimdPath::kAvx512}}) {
    if (!zt::optim::simd_path_supported(path)) continue;
    setenv(zt::optim::kCpuAdamSimdEnv, name, 1);
    EXPECT_EQ(zt::optim::sum_of_squares(big), scalar_total) << name;
  }
  if (old) {
    setenv(zt::optim::kCpuAdamSimdEnv, saved.c_str(), 1);
  } else {
    unsetenv(zt::optim::kCpuAdamSimdEnv);
  }
}
