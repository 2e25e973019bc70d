#include "core/precision/overflow_check.h"

#include <limits>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/base/error.h"
#include "core/cuda_plugin.h"

namespace {

class OverflowCheck : public testing::TestWithParam<std::tuple<torch::Dtype, int64_t>> {};

TEST_P(OverflowCheck, UnscalesFiniteValuesExactlyAndFindsNothing) {
  auto [dtype, n] = GetParam();
  torch::manual_seed(0);
  torch::Tensor x = (torch::randn({n}) * 100).to(dtype);
  torch::Tensor expected = (x.to(torch::kFloat) * 0.125f).to(dtype);  // power of 2: exact
  EXPECT_FALSE(zt::check_and_unscale_(x, 0.125f));
  EXPECT_TRUE(torch::equal(x, expected));
}

TEST_P(OverflowCheck, FindsInfAndNanAnywhere) {
  auto [dtype, n] = GetParam();
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    for (int64_t pos : {int64_t{0}, n / 2, n - 1}) {
      torch::Tensor x = torch::ones({n}, dtype);
      x[pos] = bad;
      EXPECT_TRUE(zt::check_and_unscale_(x, 1.0f)) << "value " << bad << " at " << pos;
      if (pos != 0) {
        EXPECT_EQ(x[0].item<float>(), 1.0f);  // inv_scale 1: values untouched
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DtypesAndSizes, OverflowCheck,
                         testing::Combine(testing::Values(torch::kFloat, torch::kHalf,
                                                          torch::kBFloat16),
                                          testing::Values(int64_t{1}, int64_t{1000003})));

TEST(OverflowCheck, EmptyTensorHasNoOverflow) {
  torch::Tensor x = torch::empty({0}, torch::kHalf);
  EXPECT_FALSE(zt::check_and_unscale_(x, 0.5f));
}

TEST(OverflowCheck, RejectsIntegerTensors) {
  torch::Tensor x = torch::ones({4}, torch::kInt);
  EXPECT_THROW(zt::check_and_unscale_(x, 1.0f), zt::Error);
}

// The deferred form the engine uses: one flag over many tensors, never reset by a finite one.
TEST(OverflowCheck, IntoFlagAccumulatesAcrossTensors) {
  torch::Tensor flag = torch::zeros({1}, torch::kInt);
  torch::Tensor a = torch::full({100}, 2.0f), b = torch::full({100}, 2.0f);
  zt::check_and_unscale_into_(a, 0.5f, flag);
  EXPECT_EQ(flag.item<int>(), 0);
  EXPECT_TRUE(torch::equal(a, torch::ones({100})));
  b[7] = std::numeric_limits<float>::quiet_NaN();
  zt::check_and_unscale_into_(b, 1.0f, flag);
  zt::check_and_unscale_into_(a, 1.0f, flag);
  EXPECT_EQ(flag.item<int>(), 1);
  torch::Tensor wrong = torch::zeros({1}, torch::kLong);
  EXPECT_THROW(zt::check_and_unscale_into_(a, 1.0f, wrong), zt::Error);
}

TEST(OverflowCheckCuda, MatchesCpuReference) {
  const zt::cuda::Kernels* k = zt::cuda::kernels();
  if (!k || k->device_count() == 0) {
    GTEST_SKIP() << "no CUDA device: " << (k ? "plugin loaded, 0 GPUs" : zt::cuda::load_error());
  }
  for (auto dtype : {torch::kFloat, torch::kHalf, torch::kBFloat16}) {
    torch::Tensor cpu = (torch::randn({1 << 20}) * 1000).to(dtype);
    torch::Tensor gpu = cpu.to(torch::kCUDA);
    EXPECT_EQ(zt::check_and_unscale_(cpu, 0.25f), zt::check_and_unscale_(gpu, 0.25f));
    EXPECT_TRUE(torch::equal(cpu, gpu.cpu()));
    gpu[12345] = std::numeric_limits<float>::infinity();
    EXPECT_TRUE(zt::check_and_unscale_(gpu, 1.0f));
  }
}

TEST(CudaPlugin, ReportsWhyItIsUnavailableOrLoads) {
  if (!zt::cuda::plugin_built()) {
    EXPECT_EQ(zt::cuda::kernels(), nullptr);
    EXPECT_NE(zt::cuda::load_error().find("without CUDA"), std::string::npos);
  } else {
    // Built with CUDA: the plugin must load even on a machine without a GPU.
    ASSERT_NE(zt::cuda::kernels(), nullptr) << zt::cuda::load_error();
    EXPECT_EQ(zt::cuda::kernels()->abi_version, zt::cuda::kKernelsAbiVersion);
  }
}

}  // namespace
