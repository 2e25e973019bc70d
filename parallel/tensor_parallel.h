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

#include <ATen/ATen.h>

#include "parallel/communicator.h"

namespace zt::dist {

at::Tensor enter_tensor_group(const at::Tensor& x, Communicator& group);
at::Tensor leave_tensor_group(const at::Tensor& x, Communicator& group);

// The ranks of a tensor group must compute on the same inputs (each holds slices of one model
// applied to one batch); a data pipeline that gives them different batches trains nonsense
// without any error. Throws on every rank of `group`, naming `what`, when `t` (an integer tensor:
// token ids, labels) differs across it in shape or values (compared by a position-weighted
// checksum); DeepSpeed's AutoTP checks the first step's inputs the same way. Collective.
void check_same_on_group(const at::Tensor& t, Communicator& group, const char* what);

}  // namespace zt::dist
