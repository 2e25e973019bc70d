#pragma once
// Tensor parallelism's two crossings (Megatron-LM's f and g; DeepSpeed AutoTP's LinearAllreduce):
// a layer split over the ranks of a tensor group (parallel/topology.h) takes a replicated input,
// computes its slice of the output features (column split: q, k, v, gate, up), and its row-split
// partner (o, down) turns each rank's slice back into partial sums of the whole output, which one
// all-reduce adds. Around that pair:
//
//   enter_tensor_group  forward: the input as it is (every rank holds it whole)
//                       backward: the gradient summed over the group (each rank's slice of the
//                       column-split layer contributed one part of the input's gradient)
//   leave_tensor_group  forward: the partial outputs summed over the group
//                       backward: the gradient as it is (every rank needs it whole)
//
// Every rank of the group calls them in the same order (collectives over `group`).

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "parallel/communicator.h"

namespace zt::dist {

at::Tensor enter_tensor_group(const at::Tensor& x, Communicator& group);
at::Tensor leave_tensor_group(const at::Tensor& x, Communicator& group);

// DeepSpeed AutoTP's split of `size` features over `parts` ranks (deepspeed/module_inject/
// tp_shard.py, get_shard_size): the features are `groups` equal groups (key/value heads with their
// query heads for attention; `size` itself for an MLP, whose features split one by one), and rank
// r keeps groups / parts of them, one more when r < groups % parts. `size` must divide by
// `groups`. Returns each rank's feature count.
std::vector<int64_t> split_sizes(int64_t size, int64_t parts, int64_t groups);
// Where rank `r`'s slice starts under `sizes`.
int64_t split_offset(const std::vector<int64_t>& sizes, int r);

// Every rank's `mine` (one count per split parameter, in the same order on every rank), as
// result[i][rank]: the slice sizes a tensor group's ranks hold. Collective over `group`.
std::vector<std::vector<int64_t>> gather_sizes(const std::vector<int64_t>& mine,
                                               Communicator& group);

// Every rank's `mine` (names, as many on every rank, in the same order), as result[i][rank]: the
// names a group's ranks give the same position of their models. Collective over `group`.
std::vector<std::vector<std::string>> gather_names(const std::vector<std::string>& mine,
                                                   Communicator& group);

// Every rank's slice `part` of one parameter, joined along `dim` in rank order (rank r's extent
// slices[r]; each travels padded to the largest): the whole parameter, on every rank. Not
// differentiable; collective over `group`.
at::Tensor join_slices(const at::Tensor& part, int64_t dim, const std::vector<int64_t>& slices,
                       Communicator& group);

// The ranks of a tensor group must compute on the same inputs (each holds slices of one model
// applied to one batch); a data pipeline that gives them different batches trains nonsense
// without any error. Throws on every rank of `group`, naming `what`, when `t` (an integer tensor:
// token ids, labels) differs across it in shape or values (compared by a position-weighted
// checksum); DeepSpeed's AutoTP checks the first step's inputs the same way. Collective.
void check_same_on_group(const at::Tensor& t, Communicator& group, const char* what);

}  // namespace zt::dist
