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
#include <ATen/core/ivalue.h>

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

  // `scale` times transformers' loss over this rank's tokens alone (group null), or times this
  // rank's share of the loss over every rank of `group`'s tokens (summed over the group, the
  // shares are that loss; one all-reduce of the counts, every rank of the group calls it). An
  // fp32 scalar carrying the gradient of the layers that ran with a graph; the layers that ran
  // under reentrant activation checkpointing add theirs when they run again in backward
  // (add_recompute_loss: the loss is linear in prob, with the coefficients fixed here, times the
  // gradient this loss received, which its backward records before any layer's: the engine's
  // 1/accumulation and loss scale apply to them too).
  at::Tensor loss(double scale, dist::Communicator* group);

 private:
  // This forward's masked probability sums of one layer's router logits (fp32, differentiable).
  at::Tensor probability_sum(const at::Tensor& probs, const at::Tensor& mask) const;

  bool recording_ = false;
  at::Tensor mask_;      // (N) fp32 or undefined
  at::Tensor assigned_;  // (E) fp32, no gradient
  at::Tensor prob_;      // (E) fp32, differentiable where the layer ran with a graph
  at::Tensor rows_;      // () fp32
  // d loss / d prob (E) and the mask, from the last loss(): what a recomputed layer applies,
  // times the gradient the loss received in backward (the slot, see load_balancing_loss.cpp).
  at::Tensor grad_coef_, grad_mask_;
  c10::IValue scale_slot_;
  at::Tensor anchor_;  // () requires grad: gives the slot's node a place in every graph
};

}  // namespace zt::models
