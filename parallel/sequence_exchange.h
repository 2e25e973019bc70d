#pragma once
// Ulysses sequence parallelism's exchanges (DeepSpeed's DistributedAttention and
// UlyssesSPAttentionHF): the sp ranks of a sequence group (parallel/topology.h) each hold T / sp
// consecutive positions of the same batch. Attention needs every position, so before it each
// rank trades its positions of every head for every position of H / sp heads (one all-to-all),
// runs ordinary attention on those heads, and trades back (one more).
//
//   to_heads   (B, T/sp, H, D) on rank r, positions [r T/sp, (r+1) T/sp)
//              -> (B, T, H/sp, D), heads [r H/sp, (r+1) H/sp)
//   to_sequence  the inverse
//
// Both are differentiable: the gradient of one is the other applied to the gradient, so the
// backward runs the same two all-to-alls in reverse order on every rank. Every rank of the group
// calls them in the same order (collectives over `group`).
//
// Wire: the all-to-alls move `wire` (the config's seq_parallel_communication_data_type, fp32 by
// default, as DeepSpeed's) and cast back to the input's dtype on arrival; unset: the input's.

#include <optional>

#include <ATen/ATen.h>

#include "parallel/communicator.h"

namespace zt::dist {

// x (B, T/sp, H, D), H divisible by group.size() -> (B, T, H/sp, D).
at::Tensor sequence_to_heads(const at::Tensor& x, Communicator& group,
                             std::optional<at::ScalarType> wire = std::nullopt);
// x (B, T, H/sp, D) -> (B, T/sp, H, D).
at::Tensor heads_to_sequence(const at::Tensor& x, Communicator& group,
                             std::optional<at::ScalarType> wire = std::nullopt);

// Every rank's x (B, T/sp, ...) joined along dim 1 in rank order -> (B, T, ...); not
// differentiable (attention masks). Moves fp32 whatever x's dtype, so that every backend takes it.
at::Tensor gather_sequence(const at::Tensor& x, Communicator& group);

}  // namespace zt::dist
