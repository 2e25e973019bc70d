#pragma once
// The gradient reduction of stages 0-2 in two levels over the node layout, so that the slow link
// between nodes carries one node's partial sums instead of a flat ring's traffic (the issue every
// gloo or MPI ring over several nodes has: its hops between nodes carry as much as its hops
// inside them):
//
//   stage 0, all-reduce:     reduce-scatter in the node (local index l keeps chunk l), all-reduce
//                            of that chunk across nodes (the ranks with index l), all-gather in
//                            the node;
//   stages 1-2, a rank's     the buffer reordered local-index-major, so local index l's part
//   reduce-scatter chunk:    holds chunk (b, l) of every node b; reduce-scatter in the node, then
//                            reduce-scatter across nodes: rank (b, l) ends with chunk b * L + l
//                            summed over every rank, as a flat reduce-scatter gives it.
//
// At stages 1-2 the step's publish of the updated slices goes the other way round
// (Bucket::publish_params): all-gather across nodes, then in the node.
//
// With gloo's reduce-scatter (an all-reduce of the whole input) on N nodes of L ranks, the link
// carries per node and direction 2 (N - 1) / N of the buffer instead of the flat ring's
// 2 (W - 1) / W * (one crossing per node boundary of the ring): for 2 nodes of 2, 2/3 of the
// bytes (bench/multinode/README.md, Formulas). The sums are the same values added in another
// order: equal to the flat reduction within a few fp32 ulps.
//
// Ranks must be numbered node by node with as many on every node (NodeLayout::node_major); the
// topology (parallel/topology.cpp) makes the node groups only then, and otherwise the gradients
// reduce flat.

#include <ATen/core/Tensor.h>

#include "core/zero/reduction_in_flight.h"
#include "core/zero/wait_clock.h"
#include "parallel/communicator.h"
#include "parallel/groups.h"

namespace zt::zero {

// One bucket's reduction in flight. The first hop (inside the node) starts in the constructor,
// so it overlaps what the caller does next; finish() waits for it and runs the hops left.
class HierarchicalReduce : public ReductionInFlight {
 public:
  enum class Kind { kAllReduce, kReduceScatter };
  // full: (W * n,) in its communication dtype, W = intra size * inter size. kAllReduce sums it in
  // place; kReduceScatter leaves `full` untouched.
  HierarchicalReduce(const dist::NodeGroups& groups, Kind kind, at::Tensor full);
  // kAllReduce: `full`, now the sum over all W ranks. kReduceScatter: (n,) in full's dtype, the
  // sum over all W ranks of their chunk number (node * L + local index).
  at::Tensor finish(WaitClock& clock) override;

 private:
  const dist::NodeGroups& groups_;
  Kind kind_;
  at::Tensor full_, part_;
  at::Tensor in_;  // the first hop's input, kept until it is done
  dist::WorkPtr work_;
};

// The second hop of a two-level all-gather (the publish above, and MiCS's hierarchical parameter
// gather): `across` holds this local index's slices of every node, by node; the node's ranks
// exchange them and `out` ((W * n,)) gets slice (b, l) at b * L + l.
void gather_in_node(const dist::NodeGroups& groups, const at::Tensor& across, const at::Tensor& out,
                    WaitClock& clock);

}  // namespace zt::zero
