#pragma once
// Evaluating with the stochastic weight average (optim/swa.h), as torch.optim.swa_utils users do
// with their AveragedModel after training: every rank copies its shard's running mean into its
// fp32 masters and the engine refreshes the compute parameters from them (collective: every rank
// calls it). Training should not continue afterwards (the masters are the average now).

#include "core/engine.h"

namespace zt::train {

// Returns false (and changes nothing) when the engine's optimizer keeps no average yet.
bool load_swa_weights(Engine& engine);

}  // namespace zt::train
