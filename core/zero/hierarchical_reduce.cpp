#include "core/zero/hierarchical_reduce.h"

#include <ATen/ATen.h>

#include "base/error.h"

namespace zt::zero {

HierarchicalReduce::HierarchicalReduce(const dist::NodeGroups& groups, Kind kind, at::Tensor full)
    : groups_(groups), kind_(kind), full_(std::move(full)) {
  const int64_t local = groups.intra->size(), nodes = groups.inter->size();
  ZT_INTERNAL_ASSERT(full_.numel() % (local * nodes) == 0, "a bucket not cut into W chunks");
  const int64_t n = full_.numel() / (local * nodes);
  in_ = full_;
  if (kind_ == Kind::kReduceScatter) {
    // Chunk (b, l) is chunk b * L + l; local index l must end with the N chunks (b, l).
    in_ = full_.view({nodes, local, n}).transpose(0, 1).contiguous().view({-1});
  }
  part_ = at::empty({nodes * n}, full_.options());
  work_ = groups.intra->reduce_scatter(in_, part_, dist::ReduceOp::kSum);
}

at::Tensor HierarchicalReduce::finish(WaitClock& clock) {
  clock.wait(work_);
  in_ = at::Tensor();
  if (kind_ == Kind::kAllReduce) {
    clock.wait(groups_.inter->all_reduce(part_, dist::ReduceOp::kSum));
    clock.wait(groups_.intra->all_gather(part_, full_));
    part_ = at::Tensor();
    return full_;
  }
  at::Tensor out = at::empty({part_.numel() / groups_.inter->size()}, part_.options());
  clock.wait(groups_.inter->reduce_scatter(part_, out, dist::ReduceOp::kSum));
  part_ = at::Tensor();
  return out;
}

void gather_in_node(const dist::NodeGroups& groups, const at::Tensor& across, const at::Tensor& out,
                    WaitClock& clock) {
  const int64_t nodes = groups.inter->size(), local = groups.intra->size();
  const int64_t n = across.numel() / nodes;
  at::Tensor by_local = at::empty({local * nodes * n}, across.options());
  clock.wait(groups.intra->all_gather(across, by_local));
  // by_local holds slice (b, l) at [l][b]; out holds it at b * L + l.
  out.view({nodes, local, n}).copy_(by_local.view({local, nodes, n}).transpose(0, 1));
}

}  // namespace zt::zero
