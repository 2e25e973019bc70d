#include "models/causal_lm_loss.h"

#include <torch/nn/functional/loss.h>

namespace zt::models {
namespace {

torch::Tensor token_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                  torch::nn::functional::CrossEntropyFuncOptions options) {
  return torch::nn::functional::cross_entropy(
      logits.reshape({-1, logits.size(-1)}).to(torch::kFloat), labels.reshape({-1}),
      options.ignore_index(-100));
}

}  // namespace

torch::Tensor causal_lm_loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  return token_cross_entropy(logits, labels, {});
}

torch::Tensor causal_lm_loss_total(const torch::Tensor& logits, const torch::Tensor& labels) {
  return token_cross_entropy(
      logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
}

int64_t causal_lm_tokens(const torch::Tensor& labels) {
  return labels.ne(-100).sum().item<int64_t>();
}

std::pair<double, int64_t> causal_lm_loss_sum(const torch::Tensor& logits,
                                              const torch::Tensor& labels) {
  return {causal_lm_loss_total(logits, labels).item<double>(), causal_lm_tokens(labels)};
}

}  // namespace zt::models
