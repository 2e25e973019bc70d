#pragma once
// The loss of every causal language model here (GPT-2, the LLaMA family), written once: token
// cross-entropy in fp32 over labels already shifted by the collator, -100 ignored (Hugging Face's
// ignore_index).

#include <cstdint>
#include <utility>

#include <torch/types.h>

namespace zt::models {

// Mean over the counted tokens: what a training step backpropagates.
torch::Tensor causal_lm_loss(const torch::Tensor& logits, const torch::Tensor& labels);

// The sum of the token losses (fp32, differentiable): what a rank backpropagates, scaled, when the
// loss is the mean over the whole step's tokens (train/token_loss.h).
torch::Tensor causal_lm_loss_total(const torch::Tensor& logits, const torch::Tensor& labels);

// The number of tokens a loss counts: labels != -100.
int64_t causal_lm_tokens(const torch::Tensor& labels);

// The sum of the token losses and the number of tokens counted (validation sums both over ranks,
// so the mean and the perplexity weigh every token once).
std::pair<double, int64_t> causal_lm_loss_sum(const torch::Tensor& logits,
                                              const torch::Tensor& labels);

}  // namespace zt::models
