// The tiled head and loss (models/tiled_loss.h) against the whole logits at once: the same loss
// and gradients of the hidden states and the head's weight, with ignored labels and a tile that
// does not divide the sequence; in fp32 within float rounding, in bf16 within bf16's.
#include "models/tiled_loss.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/causal_lm_loss.h"

namespace zt::models {
namespace {

struct Grads {
  torch::Tensor loss, hidden, weight;
};

Grads run(torch::ScalarType dtype, int64_t tile) {
  torch::manual_seed(3);
  torch::Tensor hidden = torch::randn({2, 11, 16}).to(dtype).requires_grad_();
  torch::Tensor weight = (0.3 * torch::randn({50, 16})).to(dtype).requires_grad_();
  torch::Tensor labels = torch::randint(0, 50, {2, 11}, torch::kLong);
  labels.index_put_({0, torch::indexing::Slice(7, torch::indexing::None)}, -100);  // padding
  labels.index_put_({1, 2}, -100);
  torch::Tensor loss = tile > 0 ? tiled_causal_lm_loss_total(hidden, weight, labels, tile)
                                : causal_lm_loss_total(at::linear(hidden, weight), labels);
  (loss * 0.37).backward();
  return {loss.detach(), hidden.grad().to(torch::kFloat), weight.grad().to(torch::kFloat)};
}

void expect_close(const Grads& got, const Grads& want, double rtol, double atol) {
  EXPECT_TRUE(torch::allclose(got.loss, want.loss, rtol, atol))
      << got.loss.item<double>() << " vs " << want.loss.item<double>();
  EXPECT_TRUE(torch::allclose(got.hidden, want.hidden, rtol, atol))
      << (got.hidden - want.hidden).abs().max().item<double>();
  EXPECT_TRUE(torch::allclose(got.weight, want.weight, rtol, atol))
      << (got.weight - want.weight).abs().max().item<double>();
}

TEST(TiledLoss, EqualsTheWholeLogitsInFp32) {
  const Grads whole = run(torch::kFloat, 0);
  for (int64_t tile : {1, 3, 4, 11, 64}) {
    SCOPED_TRACE("tile " + std::to_string(tile));
    expect_close(run(torch::kFloat, tile), whole, 1e-5, 1e-7);
  }
  // Ignored positions get no gradient.
  EXPECT_EQ(run(torch::kFloat, 3).hidden[0].narrow(0, 7, 4).abs().max().item<float>(), 0.0f);
}

TEST(TiledLoss, EqualsTheWholeLogitsInBf16) {
  expect_close(run(torch::kBFloat16, 4), run(torch::kBFloat16, 0), 2e-2, 2e-3);
}

TEST(TiledLoss, RefusesAnEmptyTile) {
  EXPECT_THROW(tiled_causal_lm_loss_total(torch::zeros({1, 2, 3}), torch::zeros({4, 3}),
                                          torch::zeros({1, 2}, torch::kLong), 0),
               std::exception);
}

}  // namespace
}  // namespace zt::models
