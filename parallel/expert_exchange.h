#pragma once
// Expert parallelism's token exchange (DeepSpeed's MoE all-to-all, torchtitan's expert-parallel
// dispatch): the ranks of an expert group (parallel/topology.h) each hold E / ep of a layer's
// experts and their own tokens. Before the experts each rank sends every routed row to the rank
// holding its expert, and after them the outputs come back the same way.
//
// The all-to-all moves equal chunks, so each rank's rows for rank j travel padded to the longest
// such run in the group (known to every rank from the per-expert counts, gathered first): no
// capacity and no dropped token. exchange_rows is differentiable, and its gradient is the same
// exchange of the gradient (an all-to-all of equal chunks is its own adjoint), so the backward
// runs the same collectives in reverse on every rank. Every rank of the group calls it once per
// exchange, whatever it routed, so a rank whose experts received nothing still takes part.

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "parallel/communicator.h"

namespace zt::dist {

// x (ep * rows, ...): chunk j (rows [j * rows, (j + 1) * rows)) goes to rank j of `group`; the
// result's chunk j is what rank j sent here. Differentiable; collective over `group`.
at::Tensor exchange_rows(const at::Tensor& x, Communicator& group);

// How many rows each rank of an expert group sends each expert: counts[s][e] for source rank s
// and expert e (E = mine.size(), the same on every rank), from every rank's `mine`. Collective.
std::vector<std::vector<int64_t>> gather_expert_counts(const std::vector<int64_t>& mine,
                                                       Communicator& group);

}  // namespace zt::dist
