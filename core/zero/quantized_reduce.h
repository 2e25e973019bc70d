#pragma once
// ZeRO++ qgZ (zero_quantized_gradients): stage 3's gradient reduce-scatter as two all-to-alls of
// block-quantized int8 values (block_quant.h) over the node layout, as the ZeRO++ paper and
// DeepSpeed's all_to_all_quant_reduce (deepspeed/runtime/comm/coalesced_collectives.py) do:
//
//   hop 1, inside the node: each rank sends, to the rank of its node with local index l, the
//          chunks of every rank with local index l (one per node); each receiver sums the L
//          copies it got, which leaves one partial sum per node;
//   hop 2, across nodes: each rank sends the partial sum of node b's chunk to node b's rank with
//          its own local index; the receiver sums the N partials: its chunk of the total.
//
// Only quantized values cross the slow link, and each rank sends (N - 1) / N of one bucket's
// worth over it, against a ring reduce-scatter's (W - 1) / W in the reduction dtype. DeepSpeed
// quantizes both hops to int4; here both are int8 (half of int4's savings, a sixteenth of its
// error per hop). Error per element of the result: the sum of half a quantization step of every
// block it passed through (L blocks in hop 1, N in hop 2).
//
// Ranks must be numbered node by node (rank = node * L + local index) with L ranks on every node;
// the caller checks that (NodeLayout::node_major) and otherwise reduce-scatters as usual.

#include <memory>

#include <ATen/core/Tensor.h>

#include "core/zero/reduction_in_flight.h"
#include "core/zero/wait_clock.h"
#include "parallel/communicator.h"
#include "parallel/groups.h"

namespace zt::zero {

// One bucket's reduction in flight: hop 1 starts in the constructor (so it overlaps what the
// caller does next), finish() waits for it, runs hop 2 and returns this rank's chunk of the sum.
class QuantizedReduceScatter : public ReductionInFlight {
 public:
  // full: (W * n,) the bucket's gradient in any floating dtype, W = intra size * inter size.
  QuantizedReduceScatter(const dist::NodeGroups& groups, const at::Tensor& full);
  // (n,) fp32: the sum over all W ranks of their chunk number (node * L + local) of `full`.
  at::Tensor finish(WaitClock& clock) override;

 private:
  const dist::NodeGroups& groups_;
  int64_t n_ = 0;
  at::Tensor q_recv_, scales_recv_;
  dist::WorkPtr q_work_, scales_work_;
};

}  // namespace zt::zero
