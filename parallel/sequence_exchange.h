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
// Uneven heads (DeepSpeed's DistributedAttention with a head count the group does not divide):
// `heads`, when given, is how many heads go to each rank (summing to H), and rank r receives
// (B, T, heads[r], D); each chunk travels padded to the largest count.
//
// Wire: the all-to-alls move `wire` (the config's seq_parallel_communication_data_type, fp32 by
// default, as DeepSpeed's) and cast back to the input's dtype on arrival; unset: the input's.

#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/ATen.h>

#include "parallel/communicator.h"

namespace zt::dist {

// x (B, T/sp, H, D), H divisible by group.size() -> (B, T, H/sp, D); or (B, T, heads[r], D).
at::Tensor sequence_to_heads(const at::Tensor& x, Communicator& group,
                             std::optional<at::ScalarType> wire = std::nullopt,
                             const std::vector<int64_t>& heads = {});
// x (B, T, H/sp, D) -> (B, T/sp, H, D); or x (B, T, heads[r], D) -> (B, T/sp, sum(heads), D).
at::Tensor heads_to_sequence(const at::Tensor& x, Communicator& group,
                             std::optional<at::ScalarType> wire = std::nullopt,
                             const std::vector<int64_t>& heads = {});

// DeepSpeed's uneven head split (deepspeed/module_inject/tp_shard.py, get_shard_size with the
// key/value head count): rank r of `parts` gets kv_heads / parts key/value heads, one more when
// r < kv_heads % parts, each with its group of query heads. Returns the key/value heads per rank;
// the query heads per rank are these times heads / kv_heads.
std::vector<int64_t> kv_heads_per_rank(int64_t kv_heads, int64_t parts);

// Every rank's x (B, T/sp, ...) joined along dim 1 in rank order -> (B, T, ...); not
// differentiable (attention masks). Moves fp32 whatever x's dtype, so that every backend takes it.
at::Tensor gather_sequence(const at::Tensor& x, Communicator& group);

}  // namespace zt::dist
