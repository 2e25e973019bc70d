#include "examples/classifier/readability_regressor.h"

namespace zt::examples {

using namespace zt::models;

ReadabilityRegressorImpl::ReadabilityRegressorImpl(const GptShape& shape) {
  GptShape s = shape;
  s.causal = false;
  trunk = register_module("trunk", Gpt(s));
  head = register_module("head", torch::nn::Linear(s.d_model, 1));
  torch::NoGradGuard no_grad;
  head->weight.normal_(0.0, 0.02);
  head->bias.zero_();
}

torch::Tensor ReadabilityRegressorImpl::forward(const torch::Tensor& input_ids,
                                                const torch::Tensor& attention_mask) {
  torch::Tensor h = trunk->hidden(input_ids, attention_mask);  // (B, T, C)
  // Mean over real tokens: padding contributes nothing, whatever the batch is padded to.
  torch::Tensor m = attention_mask.to(h.scalar_type()).unsqueeze(-1);  // (B, T, 1)
  torch::Tensor pooled = (h * m).sum(1) / m.sum(1).clamp_min(1);       // (B, C)
  return head->forward(pooled).squeeze(-1).to(torch::kFloat);
}

std::vector<std::string> ReadabilityRegressorImpl::unit_names() const {
  std::vector<std::string> names;
  for (const auto& n : trunk->unit_names()) names.push_back("trunk." + n);
  return names;
}

int64_t ReadabilityRegressorImpl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace zt::examples
