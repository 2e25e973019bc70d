#pragma once
// Expert capacity, as DeepSpeed's MoE layer limits it (deepspeed/moe/sharded_moe.py topkgating,
// read in DeepSpeed 0.19.8): with a capacity factor f > 0, each expert takes at most
//
//   capacity = max(ceil(tokens / E * f * k), min_capacity)
//
// of the routed choices of one forward's tokens on this rank (padding rows included, as
// DeepSpeed counts its input's rows); the others are dropped (the token keeps its residual and
// whatever its other choices give). Which choices an expert keeps: drop policy "probs" (DeepSpeed's
// default) the `capacity` with the largest router probabilities, "position" the first `capacity`
// tokens in order. The kept choices' weights are their probabilities renormalised over the
// token's kept choices (DeepSpeed's gates_masked / their sum; a token with none kept gets none).
//
// Capacity factor 0 (the default here, as in the Hugging Face models): no capacity, every token
// reaches its k experts. Training and evaluation may use different factors (DeepSpeed's
// capacity_factor and eval_capacity_factor).

#include <cstdint>
#include <string>

#include <torch/torch.h>

namespace zt::models {

// The per-expert limit of the formula above.
int64_t expert_capacity(int64_t tokens, int64_t experts, int64_t k, double factor,
                        int64_t min_capacity);

struct Routed {
  torch::Tensor index;   // (N, k) int64: the expert of each choice, or E where it was dropped
  torch::Tensor weight;  // (N, k) fp32: 0 where dropped
};

// probs (N, E) fp32 router probabilities; index (N, k) the top-k experts of each token (in
// topk's order) -> the choices kept under `capacity` by `policy` ("probs" or "position"), with
// DeepSpeed's renormalised weights (differentiable through probs).
Routed limit_capacity(const torch::Tensor& probs, const torch::Tensor& index, int64_t capacity,
                      const std::string& policy);

}  // namespace zt::models
