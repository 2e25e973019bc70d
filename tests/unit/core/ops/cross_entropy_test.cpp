// The token cross-entropy's LibTorch path (core/ops/cross_entropy.h), taken on the CPU and on the
// test device: the loss is LibTorch's cross_entropy of the fp32 logits, and the gradient entry
// point the tiled loss calls is the gradient of the summed loss.
#include "core/ops/cross_entropy.h"

#include <cmath>
#include <cstdlib>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/error.h"
#include "testdevice/test_device.h"

namespace zt::ops {
namespace {

// The test device is loaded before the first backward of the process: LibTorch's autograd engine
// sizes its per-device queues then, and a device registered later has none.
class TokenCrossEntropy : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    testdevice::load_test_device(std::getenv(testdevice::kLibraryEnv));
  }
};

// Rows of bf16 logits, one of them ignored, one with a -inf logit.
std::pair<torch::Tensor, torch::Tensor> inputs() {
  torch::manual_seed(11);
  torch::Tensor x = (torch::randn({6, 13}) * 3).to(torch::kBFloat16);
  x.index_put_({0, 4}, -std::numeric_limits<float>::infinity());
  torch::Tensor y = torch::tensor({2, 12, -100, 0, 7, 5}, torch::kLong);
  return {x, y};
}

TEST_F(TokenCrossEntropy, OnTheHostIsLibTorchsLossOfTheWidenedLogits) {
  auto [x, y] = inputs();
  EXPECT_FALSE(fused_cross_entropy(x));
  namespace F = torch::nn::functional;
  EXPECT_TRUE(torch::equal(
      token_cross_entropy(x, y, TokenReduction::kMean),
      F::cross_entropy(x.to(torch::kFloat), y, F::CrossEntropyFuncOptions().ignore_index(-100))));
  EXPECT_TRUE(torch::equal(
      token_cross_entropy(x, y, TokenReduction::kSum),
      F::cross_entropy(x.to(torch::kFloat), y,
                       F::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kSum))));
  // No counted row: the mean is NaN, as LibTorch's.
  const torch::Tensor none = torch::full({6}, -100, torch::kLong);
  EXPECT_TRUE(std::isnan(token_cross_entropy(x, none, TokenReduction::kMean).item<double>()));
}

// token_cross_entropy_grad(logits, labels, s) is d(s * summed loss)/d logits in the logits' type:
// the same as autograd's through the summed loss, up to one rounding of the bf16 result.
void expect_gradient_of_the_sum(const c10::Device& device) {
  auto [x, y] = inputs();
  x = x.to(device);
  y = y.to(device);
  const torch::Tensor scale = torch::full({}, 0.37, torch::TensorOptions(device));
  torch::Tensor xg = x.clone().requires_grad_(true);
  (token_cross_entropy(xg, y, TokenReduction::kSum) * scale).backward();
  const torch::Tensor g = token_cross_entropy_grad(x, y, scale);
  ASSERT_EQ(g.scalar_type(), torch::kBFloat16);
  ASSERT_EQ(g.device(), device);
  const torch::Tensor a = g.cpu().to(torch::kDouble), b = xg.grad().cpu().to(torch::kDouble);
  EXPECT_LE(((a - b).abs() - b.abs() / 128).max().item<double>(), 1e-12);
  // The ignored row has no gradient; the -inf logit none either.
  EXPECT_EQ(a[2].abs().sum().item<double>(), 0.0);
  EXPECT_EQ(a[0][4].item<double>(), 0.0);
  // Each counted row's gradient sums to 0 (softmax sums to 1, minus the one-hot).
  EXPECT_LT(a.sum(1).abs().max().item<double>(), 0.37 * 13 / 128);
}

TEST_F(TokenCrossEntropy, GradientEntryIsTheGradientOfTheSumOnTheHost) {
  expect_gradient_of_the_sum(c10::Device(c10::kCPU));
}

TEST_F(TokenCrossEntropy, OnTheTestDeviceTakesLibTorchsOpsThereAndEqualsTheHost) {
  const c10::Device dev = testdevice::test_device(0);
  auto [x, y] = inputs();
  EXPECT_FALSE(fused_cross_entropy(x.to(dev)));
  expect_gradient_of_the_sum(dev);
  EXPECT_TRUE(torch::equal(token_cross_entropy(x.to(dev), y.to(dev), TokenReduction::kMean).cpu(),
                           token_cross_entropy(x, y, TokenReduction::kMean)));
  // Labels left on the host fail as they would on a GPU.
  EXPECT_ANY_THROW(token_cross_entropy(x.to(dev), y, TokenReduction::kMean));
}

TEST_F(TokenCrossEntropy, RefusesWhatIsNotRowsOfLogits) {
  auto [x, y] = inputs();
  EXPECT_THROW(token_cross_entropy(x.view({2, 3, 13}), y, TokenReduction::kMean), Error);
  EXPECT_THROW(token_cross_entropy(x, y.to(torch::kInt), TokenReduction::kMean), Error);
  EXPECT_THROW(token_cross_entropy_grad(x, y, torch::ones({2})), Error);
}

}  // namespace
}  // namespace zt::ops
