#include "core/zero/quantized_reduce.h"

#include <ATen/ATen.h>

#include "base/error.h"
#include "core/zero/block_quant.h"

namespace zt::zero {

QuantizedReduceScatter::QuantizedReduceScatter(const dist::NodeGroups& groups,
                                               const at::Tensor& full)
    : groups_(groups) {
  const int64_t local = groups.intra->size(), nodes = groups.inter->size();
  ZT_INTERNAL_ASSERT(full.numel() % (local * nodes) == 0, "a bucket not cut into W chunks");
  n_ = full.numel() / (local * nodes);
  // Chunk of rank (b, l) is chunk b * L + l; hop 1 sends, to local index l, the N chunks (b, l)
  // for b = 0..N-1: the chunks reordered local-index-major.
  const at::Tensor by_local =
      full.view({nodes, local, n_}).transpose(0, 1).reshape({local * nodes * n_});
  const QuantBlocks qb = quant_blocks(n_);
  at::Tensor q, scales;
  quantize_blocks(by_local, qb, &q, &scales, local * nodes);
  q_recv_ = at::empty_like(q);
  scales_recv_ = at::empty_like(scales);
  q_work_ = groups.intra->all_to_all(q, q_recv_);
  scales_work_ = groups.intra->all_to_all(scales, scales_recv_);
}

at::Tensor QuantizedReduceScatter::finish(WaitClock& clock) {
  const int64_t local = groups_.intra->size(), nodes = groups_.inter->size();
  clock.wait(q_work_);
  clock.wait(scales_work_);
  const QuantBlocks qb = quant_blocks(n_);
  // From every local rank, the N chunks of this local index: sum over the node's ranks.
  at::Tensor hop1 = at::empty({local * nodes * n_},
                              at::TensorOptions().dtype(at::kFloat).device(q_recv_.device()));
  dequantize_blocks(q_recv_, scales_recv_, qb, local * nodes, hop1);
  const at::Tensor partial = hop1.view({local, nodes * n_}).sum(0);  // node b's chunk at b
  at::Tensor q, scales;
  quantize_blocks(partial, qb, &q, &scales, nodes);
  at::Tensor q2 = at::empty_like(q), scales2 = at::empty_like(scales);
  dist::WorkPtr w = groups_.inter->all_to_all(q, q2);
  dist::WorkPtr ws = groups_.inter->all_to_all(scales, scales2);
  clock.wait(w);
  clock.wait(ws);
  at::Tensor hop2 = at::empty({nodes * n_}, hop1.options());
  dequantize_blocks(q2, scales2, qb, nodes, hop2);
  q_recv_ = at::Tensor();
  scales_recv_ = at::Tensor();
  return hop2.view({nodes, n_}).sum(0);
}

}  // namespace zt::zero
