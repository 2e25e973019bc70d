#pragma once
// zt::zero::plan_bucket: the one place where a bucket's options (bucket_options.h) become its
// parts. Every stage and mode choice of core/zero/ is made here, once, when a bucket is built;
// the bucket (bucket.h) and its parts then run without asking again.
//
// clang-format off
//   stage  stepped range  gradients (grad_reduction.h)  resident parameters        after the step
//   0      the buffer     WindowGrads, all-reduce        the buffer                 nothing to publish
//   1      owned slice    WindowGrads, reduce-scatter    the buffer                 publish the slices
//   2      owned slice    MicroStepGrads                 the buffer                 publish the slices
//   3      owned slice    MicroStepGrads                 a ParamShard and its       (persistent buffers:
//                                                        ShardGather; persistent    publish the slices)
//                                                        buffers: the buffer
// clang-format on
//
// The transports: gradients over flat collectives, two levels over the nodes (stages 0-2,
// hierarchical reduction) or qgZ's quantized all-to-alls (stages 2-3); parameters published flat
// or across nodes first (stages 1-2, hierarchical reduction); gathered as listed in
// shard_gather.h.

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/zero/bucket_options.h"
#include "core/zero/flat_buffer.h"
#include "core/zero/grad_reduction.h"
#include "core/zero/param_shard.h"
#include "core/zero/shard_gather.h"

namespace zt::zero {

// Sends this rank's updated slice `own` of `params` to every rank (in place).
using Publish = std::function<void(const at::Tensor& own, const at::Tensor& params,
                                   dist::Communicator& comm, WaitClock& clock)>;

struct BucketParts {
  dist::Range stepped;
  std::unique_ptr<GradReduction> grads;  // null for a frozen buffer
  // A released stage-3 buffer's resident shard and how it is gathered; null where the full
  // buffer stays resident.
  std::unique_ptr<ParamShard> shard;
  std::unique_ptr<ShardGather> gather;
  Publish publish;  // null where there is nothing to publish (stage 0, one rank)
  // A persistent buffer of quantized frozen weights computes with its shards' rebuilt blocks
  // (as DeepSpeed's does).
  bool round_to_blocks = false;
};

// params: the flat buffer (its dtype and device). adopted_shard: partitioned construction's shard
// of a released buffer (undefined otherwise); adopting: built by partitioned construction.
BucketParts plan_bucket(const BucketOptions& o, const dist::FlatLayout& layout,
                        const at::Tensor& params, bool adopting, at::Tensor adopted_shard);

// Whether a buffer of `numel` elements stays gathered (persistent): at stage 3, below
// stage3_param_persistence_threshold elements. The engine's buckets and partitioned construction
// both ask here.
bool stays_gathered(int stage, int64_t numel, int64_t persistence_threshold);

// DeepSpeed's stage3_max_reuse_distance (PartitionedParameterCoordinator.__params_to_release):
// after a module's forward its parameters stay gathered when they are used again before that
// many parameter elements have been fetched, counting from the module after it. Here the units
// are the modules: from unit u's forward to its backward come the units after it, the root
// (its head), the root again and those units once more in backward, so u is kept when twice the
// elements of the units after it and of the root are below max_reuse_distance (0: every unit is
// released after its forward). unit_numel: every parameter of each unit, frozen ones included,
// the root last. A routed unit (a layer's experts, gathered by its routing) is never kept. The
// engine (ParamGather) and the memory plan (core/plan/memory_plan.cpp) both ask here.
std::vector<bool> kept_for_backward(const std::vector<int64_t>& unit_numel,
                                    const std::vector<bool>& routed, int64_t max_reuse_distance);

}  // namespace zt::zero
