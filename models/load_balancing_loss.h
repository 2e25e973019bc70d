#pragma once
// The load-balancing loss of a mixture of experts, as transformers' load_balancing_loss_func
// computes it for Mixtral, Qwen2-MoE and Qwen3-MoE (Switch Transformer's auxiliary loss): over
// every routed layer's tokens of one forward together,
//
//   loss = E * sum_e (assigned_e / rows) * (prob_e / rows)
//
// assigned_e: the top-k choices of expert e, prob_e: the router's softmax probabilities of e
// summed over tokens, rows: the tokens counted (each layer counts its tokens once more); padding
// (attention mask 0) is left out of all three. Only prob carries a gradient.
//
// When ranks split a batch, transformers (and DeepSpeed under it) compute it from each rank's own
// tokens, which is not the loss of the whole batch. With a group, the counts are summed over the
// group first, so the ranks' shares add up to the loss one process computes over the union of
// their tokens.

#include <cstdint>
#include <memory>

#include <ATen/core/Tensor.h>

#include "parallel/communicator.h"

namespace zt::models {

// What the routed layers of one forward add (models/llama/llama_moe.h); the model clears it
// before each forward.
class RouterStats {
 public:
  // On (the model's output_router_logits) or off: off, add() does nothing.
  void set_recording(bool on) { recording_ = on; }
  bool recording() const { return recording_; }
  // The tokens' mask for this forward (B*T, this rank's positions; 1 = counted), or undefined
  // (every token counts).
  void begin_forward(const at::Tensor& token_mask);
  // One routed layer: router_logits (N, E) in the compute dtype, k experts per token.
  void add(const at::Tensor& router_logits, int64_t k);
  bool empty() const { return !prob_.defined(); }

  // transformers' loss over this rank's tokens alone (fp32 scalar, differentiable).
  at::Tensor local_loss() const;
  // This rank's share of the loss over every rank of `group`'s tokens: summed over the group, the
  // shares are that loss (one all-reduce of the counts; every rank of the group calls it).
  at::Tensor group_share(dist::Communicator& group) const;

 private:
  bool recording_ = false;
  at::Tensor mask_;      // (N) fp32 or undefined
  at::Tensor assigned_;  // (E) fp32, no gradient
  at::Tensor prob_;      // (E) fp32, differentiable
  at::Tensor rows_;      // () fp32
};

}  // namespace zt::models
