#include "core/zero/bucket_plan.h"

#include <ATen/ATen.h>

#include "base/error.h"
#include "core/zero/hierarchical_reduce.h"
#include "core/zero/quantized_reduce.h"

namespace zt::zero {
namespace {

// qgZ: the quantized all-to-alls' fp32 sum, in the accumulation dtype.
class CastReduction : public ReductionInFlight {
 public:
  CastReduction(std::unique_ptr<ReductionInFlight> r, at::ScalarType dtype)
      : r_(std::move(r)), dtype_(dtype) {}
  at::Tensor finish(WaitClock& clock) override { return r_->finish(clock).to(dtype_); }

 private:
  std::unique_ptr<ReductionInFlight> r_;
  at::ScalarType dtype_;
};

StartReduction plan_grad_transport(const BucketOptions& o, int64_t shard) {
  if (o.hierarchical_reduce != nullptr && o.stage <= 2) {
    const dist::NodeGroups* g = o.hierarchical_reduce;
    const auto kind = o.stage == 0 ? HierarchicalReduce::Kind::kAllReduce
                                   : HierarchicalReduce::Kind::kReduceScatter;
    return [g, kind](dist::Communicator&, const at::Tensor& in,
                     const at::Tensor&) -> std::unique_ptr<ReductionInFlight> {
      return std::make_unique<HierarchicalReduce>(*g, kind, in);
    };
  }
  if (o.quantized_reduce != nullptr && o.stage >= 2) {
    const dist::NodeGroups* g = o.quantized_reduce;
    const at::ScalarType acc = o.grad_dtype;
    return [g, acc](dist::Communicator&, const at::Tensor& in,
                    const at::Tensor&) -> std::unique_ptr<ReductionInFlight> {
      return std::make_unique<CastReduction>(std::make_unique<QuantizedReduceScatter>(*g, in), acc);
    };
  }
  return o.stage == 0 ? flat_all_reduce() : flat_reduce_scatter(shard);
}

Publish plan_publish(const BucketOptions& o) {
  if (o.stage == 0 || o.world == 1) return nullptr;
  if (o.hierarchical_reduce != nullptr && o.stage <= 2) {
    // Across nodes first: this local index's slices (b, l) of every node b cross the link once;
    // then the node's ranks exchange them.
    const dist::NodeGroups* g = o.hierarchical_reduce;
    return [g](const at::Tensor& own, const at::Tensor& params, dist::Communicator&,
               WaitClock& clock) {
      at::Tensor across = at::empty({g->inter->size() * own.numel()}, own.options());
      clock.wait(g->inter->all_gather(own, across));
      gather_in_node(*g, across, params, clock);
    };
  }
  // In place: `own` is this rank's slice of params (MPI_IN_PLACE; NCCL's in-place form), so the
  // updated slice is not copied first.
  return [](const at::Tensor& own, const at::Tensor& params, dist::Communicator& comm,
            WaitClock& clock) {
    at::Tensor out = params;  // a handle: the values land in params' storage
    clock.wait(comm.all_gather(own, out));
  };
}

std::unique_ptr<GatherWire> plan_wire(const BucketOptions& o, bool from_shards) {
  if (o.quantized_storage) return stored_wire(o.world);
  if (o.quantized_weights) return quantized_wire();
  // MiCS's hierarchical gather; qwZ's gathers stay one all-gather.
  if (from_shards && o.hierarchical_gather != nullptr)
    return two_level_wire(*o.hierarchical_gather);
  return exact_wire();
}

}  // namespace

BucketParts plan_bucket(const BucketOptions& o, const dist::FlatLayout& layout,
                        const at::Tensor& params, bool adopting, at::Tensor adopted_shard) {
  ZT_INTERNAL_ASSERT(!adopting || o.stage == 3, "only stage 3 adopts partitioned buffers");
  BucketParts parts;
  parts.stepped = o.stage == 0 ? dist::Range{0, layout.padded_numel()} : layout.shard_range(o.rank);
  if (!o.frozen) {
    GradReductionSpec spec;
    spec.grad = params.options().dtype(o.grad_dtype);
    spec.comm_dtype = o.comm_dtype;
    spec.pre_reduce_scale = o.pre_reduce_scale;
    spec.padded = layout.padded_numel();
    spec.shard = layout.shard_numel();
    spec.transport = plan_grad_transport(o, spec.shard);
    parts.grads = o.stage <= 1 ? make_window_grads(spec, /*all_reduce=*/o.stage == 0)
                               : make_micro_step_grads(spec, o.release_grad_shard);
  }
  parts.publish = plan_publish(o);
  parts.round_to_blocks = o.quantized_storage && o.persistent;
  if (o.stage != 3 || o.persistent) return parts;
  ShardPlacement where;
  where.device = params.device();
  where.host = o.host_shard;
  where.pin = o.pin_shard;
  parts.shard = o.quantized_storage ? make_quantized_shard(where, layout.shard_numel(), o.world)
                                    : make_memory_shard(where, std::move(adopted_shard));
  parts.gather = std::make_unique<ShardGather>(
      plan_wire(o, /*from_shards=*/true), o.hpz > 1 ? plan_wire(o, /*from_shards=*/false) : nullptr,
      o.hpz, o.hpz_rank, parts.stepped);
  return parts;
}

bool stays_gathered(int stage, int64_t numel, int64_t persistence_threshold) {
  return stage == 3 && numel < persistence_threshold;
}

std::vector<bool> kept_for_backward(const std::vector<int64_t>& unit_numel,
                                    const std::vector<bool>& routed, int64_t max_reuse_distance) {
  ZT_CHECK(!unit_numel.empty() && routed.size() == unit_numel.size(),
           "kept_for_backward: one element count and one routed flag per unit, the root last");
  const size_t root = unit_numel.size() - 1;
  std::vector<bool> kept(unit_numel.size(), false);
  int64_t after = unit_numel[root];  // the units after u, and the root
  for (size_t u = root; u-- > 0;) {
    kept[u] = !routed[u] && 2 * after < max_reuse_distance;
    after += unit_numel[u];
  }
  return kept;
}

}  // namespace zt::zero
