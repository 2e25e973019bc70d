#include "models/causal_lm_loss.h"

#include "core/ops/cross_entropy.h"

namespace zt::models {
namespace {

torch::Tensor rows_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                 ops::TokenReduction reduction) {
  return ops::token_cross_entropy(logits.reshape({-1, logits.size(-1)}), labels.reshape({-1}),
                                  reduction);
}

}  // namespace

torch::Tensor causal_lm_loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  return rows_cross_entropy(logits, labels, ops::TokenReduction::kMean);
}

torch::Tensor causal_lm_loss_total(const torch::Tensor& logits, const torch::Tensor& labels) {
  return rows_cross_entropy(logits, labels, ops::TokenReduction::kSum);
}

int64_t causal_lm_tokens(const torch::Tensor& labels) {
  return labels.ne(-100).sum().item<int64_t>();
}

std::pair<double, int64_t> causal_lm_loss_sum(const torch::Tensor& logits,
                                              const torch::Tensor& labels) {
  return {causal_lm_loss_total(logits, labels).item<double>(), causal_lm_tokens(labels)};
}

}  // namespace zt::models
