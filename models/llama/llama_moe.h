#pragma once
// The mixture of experts that replaces a decoder layer's MLP in Mixtral, Qwen2-MoE and Qwen3-MoE
// (llama_shape.h MoeShape), computing what transformers 5 computes, under its parameter names:
//
//   mlp.gate.weight               (E, C)      the router
//   mlp.experts.gate_up_proj      (E, 2I, C)  each expert's gate rows, then its up rows
//   mlp.experts.down_proj         (E, C, I)
//   mlp.shared_expert.{gate,up,down}_proj.weight, mlp.shared_expert_gate.weight (1, C)
//                                             Qwen2-MoE's shared expert
//
// Checkpoints on disk keep one tensor per expert (mlp.experts.<e>.{gate,up,down}_proj.weight,
// Mixtral's block_sparse_moe.experts.<e>.{w1,w3,w2}.weight): hf_llama.h converts both ways.
//
// Per token x: probabilities p = softmax(gate x) in fp32, the k largest (renormalised to sum 1
// with norm_topk_prob), out = sum over the k of p_e * down_e(silu(gate_e x) * up_e x), plus
// sigmoid(shared_expert_gate x) * shared_expert(x). No capacity: every token reaches its experts.
//
// Expert parallelism (set_expert_parallel, the topology's expert group of ep ranks): rank j keeps
// experts [j E/ep, (j+1) E/ep), the first dimension of both fused parameters cut to them (the
// engine's tensor_split_params, dimension 0). Routing stays on each rank's own tokens; the rows
// routed to an expert travel to its rank and back (parallel/expert_exchange.h), and each rank
// weighs and adds its rows' outputs in ascending expert order, as without the split.

#include <memory>

#include <torch/torch.h>

#include "core/zero/call_unit.h"
#include "models/llama/llama_layers.h"
#include "models/load_balancing_loss.h"

namespace zt::models {

// The experts' weights as one parameter per projection (transformers' MixtralExperts). A routed
// stage-3 unit (core/zero/call_unit.h): once a forward knows the rows each local expert takes,
// the engine gathers only the experts some rank of their ZeRO group routed to.
class MoeExpertsImpl : public torch::nn::Module, public RoutedUnit {
 public:
  MoeExpertsImpl(int64_t experts, int64_t hidden, int64_t intermediate);
  // x (N, C); index (N, k) the chosen experts, weight (N, k) their weights -> (N, C). Experts in
  // ascending order, each over its tokens in order of choice rank then position (transformers'
  // order, so the sums round alike).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& index,
                        const torch::Tensor& weight);
  // (E) int64: the tokens each expert took in the last forward (a rank's own; for logs, tests).
  const torch::Tensor& tokens_per_expert() const { return tokens_; }
  // Keeps this rank's E / ep experts of `group` (null or one rank: all). Throws naming the counts
  // when ep does not divide E.
  void set_expert_parallel(std::shared_ptr<dist::Communicator> group);
  torch::Tensor gate_up_proj, down_proj;

 private:
  // One expert over rows (m, C) -> (m, C), unweighted; gate_up and down are its weights (of the
  // unbound fused parameters: one unbind per forward, whose backward stacks the experts'
  // gradients once, where indexing each would fill a zero gradient of the whole parameter).
  torch::Tensor expert(const torch::Tensor& gate_up, const torch::Tensor& down,
                       const torch::Tensor& rows) const;
  // forward under expert parallelism.
  torch::Tensor forward_exchanged(const torch::Tensor& x, const torch::Tensor& index,
                                  const torch::Tensor& weight);
  torch::Tensor tokens_;
  int64_t num_experts_;                     // E, every rank's together
  std::shared_ptr<dist::Communicator> ep_;  // null: every expert here
};
TORCH_MODULE(MoeExperts);

// gate.weight (E, C): a module of its own so the name is transformers'.
class MoeRouterImpl : public torch::nn::Module {
 public:
  MoeRouterImpl(int64_t experts, int64_t hidden);
  torch::Tensor weight;
};
TORCH_MODULE(MoeRouter);

class SparseMoeBlockImpl : public torch::nn::Module {
 public:
  // `stats`: where a forward adds its routing for the load-balancing loss (the model's).
  SparseMoeBlockImpl(const LlamaShape& shape, std::shared_ptr<RouterStats> stats);
  // x (B, T, C) -> (B, T, C).
  torch::Tensor forward(const torch::Tensor& x);

  MoeRouter gate{nullptr};
  MoeExperts experts{nullptr};
  LlamaMlp shared_expert{nullptr};                // Qwen2-MoE, else null
  torch::nn::Linear shared_expert_gate{nullptr};  // with it

 private:
  MoeShape moe_;
  std::shared_ptr<RouterStats> stats_;
};
TORCH_MODULE(SparseMoeBlock);

}  // namespace zt::models
