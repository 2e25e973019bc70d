#pragma once
// The classifier example's model: the GPT example's trunk (models/gpt/gpt_model.h) used as a
// bidirectional encoder (GptShape::causal = false), mean-pooled over the real tokens, and a linear
// head to one number: the standardized readability grade.
//
// Parameter names: trunk.wte.weight, trunk.wpe.weight, trunk.blocks.<i>.*, trunk.ln_f.*,
// head.{weight,bias}. Stage-3 units: trunk.blocks.<i> (unit_names()); the rest is the root unit.
// The trunk's tied LM head is not used (wte is only the input embedding here).

#include <string>
#include <vector>

#include <torch/torch.h>

#include "models/gpt/gpt_model.h"

namespace zt::examples {

class ReadabilityRegressorImpl : public torch::nn::Module {
 public:
  explicit ReadabilityRegressorImpl(const models::GptShape& shape);

  // input_ids, attention_mask (B, T) int64 -> (B,) fp32 predictions.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);

  std::vector<std::string> unit_names() const;
  int64_t num_parameters() const;

  models::Gpt trunk{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(ReadabilityRegressor);

}  // namespace zt::examples
