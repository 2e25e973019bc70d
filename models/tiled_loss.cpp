#include "models/tiled_loss.h"

#include <torch/autograd.h>

#include "base/error.h"
#include "core/ops/cross_entropy.h"

namespace zt::models {
namespace {

// One tile's logits as (positions, V) rows in the compute dtype, as the untiled loss computes
// them; the loss and its gradient (core/ops/cross_entropy.h) take them from there.
torch::Tensor tile_logits(const torch::Tensor& h, const torch::Tensor& weight) {
  return at::linear(h, weight).reshape({-1, weight.size(0)});
}

struct TiledLoss : torch::autograd::Function<TiledLoss> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& labels,
                               int64_t tile) {
    ctx->save_for_backward({hidden, weight, labels});
    ctx->saved_data["tile"] = tile;
    torch::NoGradGuard no_grad;
    torch::Tensor total = torch::zeros({}, hidden.options().dtype(torch::kFloat));
    const int64_t t = hidden.size(1);
    for (int64_t begin = 0; begin < t; begin += tile) {
      const int64_t n = std::min(tile, t - begin);
      total += ops::token_cross_entropy(tile_logits(hidden.narrow(1, begin, n), weight),
                                        labels.narrow(1, begin, n).reshape({-1}),
                                        ops::TokenReduction::kSum);
    }
    return total;
  }

  // d(sum of token losses)/d logits = softmax(logits) - one_hot(label) on counted positions, 0 on
  // ignored ones; times the upstream scalar, cast to the compute dtype, through the matmul.
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &hidden = saved[0], &weight = saved[1], &labels = saved[2];
    const int64_t tile = ctx->saved_data["tile"].toInt();
    const torch::Tensor& scale = grads[0];
    const int64_t t = hidden.size(1);
    torch::Tensor grad_hidden = torch::empty_like(hidden);
    torch::Tensor grad_weight = torch::zeros(weight.sizes(), weight.options().dtype(torch::kFloat));
    for (int64_t begin = 0; begin < t; begin += tile) {
      const int64_t n = std::min(tile, t - begin);
      const torch::Tensor h = hidden.narrow(1, begin, n);
      const torch::Tensor y = labels.narrow(1, begin, n).reshape({-1});
      const torch::Tensor gd = ops::token_cross_entropy_grad(tile_logits(h, weight), y, scale);
      grad_hidden.narrow(1, begin, n).copy_(at::matmul(gd, weight).view(h.sizes()));
      grad_weight.add_(at::matmul(gd.t(), h.reshape({-1, h.size(-1)})).to(torch::kFloat));
    }
    return {grad_hidden, grad_weight.to(weight.scalar_type()), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor tiled_causal_lm_loss_total(const torch::Tensor& hidden, const torch::Tensor& weight,
                                         const torch::Tensor& labels, int64_t tile) {
  ZT_CHECK(tile >= 1, "tiled loss: tile must be >= 1 positions, got ", tile);
  ZT_CHECK(hidden.dim() == 3 && labels.sizes() == hidden.sizes().slice(0, 2),
           "tiled loss: hidden (B, T, C) and labels (B, T) expected, got ", hidden.sizes(), " and ",
           labels.sizes());
  return TiledLoss::apply(hidden, weight, labels, tile);
}

}  // namespace zt::models
