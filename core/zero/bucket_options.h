#pragma once
// zt::zero::BucketOptions: what one flat buffer of parameters (core/zero/bucket.h) is asked to do.
// plan_bucket (core/zero/bucket_plan.h) turns them into the bucket's parts once, when it is built.

#include <ATen/core/ScalarType.h>

#include "parallel/groups.h"

namespace zt::zero {

struct BucketOptions {
  int stage = 0;
  int rank = 0;
  int world = 1;
  at::ScalarType grad_dtype = at::kFloat;  // accumulation dtype A
  at::ScalarType comm_dtype = at::kFloat;  // reduction dtype C (communication_data_type)
  // Multiplies the gradient just before it is reduced (DeepSpeed's prescale_gradients: 1/N;
  // gradient_predivide_factor f: 1/f). The rest of the average is applied at the step.
  double pre_reduce_scale = 1.0;
  // Stage 3: buffers below this many elements stay gathered (never released).
  bool persistent = false;
  // Stage 3: a buffer of frozen parameters (unit_buckets.h: make_frozen_buckets). It is sharded,
  // gathered and released like the others, but has no gradient buffers and is never stepped.
  bool frozen = false;
  // Stage 3, ZeRO++ zero_quantized_nontrainable_weights, frozen buffers only: the resident shard
  // is int8 blocks and fp32 scales (block_quant.h), quantized once from the values it is given,
  // and gathers move those (an hpZ copy too). The gathered weights carry the quantization error;
  // so does a persistent buffer, which keeps its shards' rebuilt blocks (as DeepSpeed's does).
  bool quantized_storage = false;
  // Stage 3, offload_param: the resident shard lives in host memory (pinned when pin_shard and
  // the parameters are on a GPU). On a CPU model it is there anyway.
  bool host_shard = false;
  bool pin_shard = false;
  // Stage 3, ZeRO++ hpZ (zero_hpz_partition_size): after a gather from the shards, this rank
  // keeps a secondary copy of the full buffer partitioned over `hpz` consecutive ranks (its
  // part: index hpz_rank), and later gathers take it over that group until the values change.
  int hpz = 1;
  int hpz_rank = 0;
  // Stage 3, ZeRO++ qwZ (zero_quantized_weights): every parameter all-gather (from the shards or
  // the hpZ copy) moves int8 blocks and their scales (block_quant.h) instead of the values.
  bool quantized_weights = false;
  // Stage 3, ZeRO++ qgZ (zero_quantized_gradients): the node groups its gradient reduction runs
  // its two quantized all-to-alls over (quantized_reduce.h), or null for a plain reduce-scatter.
  const dist::NodeGroups* quantized_reduce = nullptr;
  // Stages 0-2: the node groups the gradient reduction runs its two levels over
  // (hierarchical_reduce.h), and at stages 1-2 the publish of the updated parameters too (an
  // all-gather across nodes, then in the node); null: flat collectives over every rank.
  const dist::NodeGroups* hierarchical_reduce = nullptr;
  // Stage 3, MiCS's mics_hierarchical_params_gather: the node groups of a shard group that spans
  // nodes; a gather from the shards then runs across nodes first (this local index's shards of
  // every node), then in the node. Not with qwZ, whose gathers stay one all-gather.
  const dist::NodeGroups* hierarchical_gather = nullptr;
  // A CPU model (stages 2-3): the gradient shard holds bytes only from backward's first
  // reduce-scatter to the step, not through the forward, whose activations make a CPU step's
  // memory peak; the host caching allocator (host_caching_allocator.h) hands them to the next
  // step again. Otherwise the gradient shard is allocated for good.
  bool release_grad_shard = false;
};

}  // namespace zt::zero
