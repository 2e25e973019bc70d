#pragma once
// The loss one process would train on, split over ranks: the mean token loss over every counted
// token of an optimizer step (all data-parallel ranks, all sequence parts, all accumulation
// micro-batches), as Hugging Face's Trainer normalises by num_items_in_batch. Each rank
// backpropagates its own token-loss sum times the scale below; the engine's gradient average
// (sum over ranks, 1/dp, 1/accumulation: core/engine_setup.cpp) then gives exactly the gradient of
// that mean, however unevenly padding spreads the tokens over ranks, parts and micro-batches.
//
//   scale = dp * accumulation / (tokens counted over every rank and micro-batch of the step)
//
// A per-rank mean instead (the loss DeepSpeed's examples backpropagate) weighs a token by the
// inverse of its own micro-batch's count, which equals this only when every micro-batch counts
// the same tokens; a sequence split makes the counts differ by design (padding sits at the end).

#include <cstdint>

#include "parallel/communicator.h"
#include "parallel/topology.h"

namespace zt::train {

// `local_tokens`: the tokens this rank counts over the step's micro-batches. Collective over
// topology.batch (one all-reduce). A step that counts no token anywhere gets scale 0.
double token_loss_scale(int64_t local_tokens, const dist::Topology& topology, int accumulation);

}  // namespace zt::train
