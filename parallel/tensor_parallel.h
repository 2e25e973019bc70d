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

}  // namespace zt::dist
