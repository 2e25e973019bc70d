#pragma once
// zt::zero::Bucket: one flat buffer of trainable parameters (core/zero/flat_buffer.h) and the ZeRO
// state kept for it: its layout, the range this rank steps, its gradient accumulation buffer and
// its in-flight collectives. The four verbs of overlap are the only way communication starts and
// ends (docs/DESIGN.md, "The overlap timeline"):
//
// clang-format off
//   start_grad_sync / finish_grad_sync        reduce gradients (all-reduce at stage 0,
//                                             reduce-scatter at stages 1-3; in two levels over
//                                             the nodes where BucketOptions asks) and fold the
//                                             result into the buffer
//   start_param_gather / finish_param_gather  stage 3: rebuild the full parameters from the shards
//   release_params                            stage 3: free the full parameters again
// clang-format on
//
// Buffers per rank (N ranks, padded = N * shard, D compute dtype, A gradient accumulation dtype,
// C communication dtype):
//
// clang-format off
//   buffer       shape      dtype  stages  contents
//   params       (padded,)  D      0-3     every parameter is a view of it; stage 3: storage
//                                          released between uses, except in a persistent buffer
//                                          (always resident)
//   param_shard  (shard,)   D      3       not persistent: this rank's slice, always resident (in
//                                          host memory with offload_param, in a file with
//                                          offload_param nvme: nvme_params.h)
//   grad_full    (padded,)  A      0-1     the window's full gradient, reduced on the boundary
//   grad_shard   (shard,)   A      2-3     the window's reduced slice
//   staging      (padded,)  A      2-3     this micro-step's gradients until reduce-scattered
//                                          (transient: freed by finish_grad_sync)
//   comm_in      (padded,)  C      0-3     the tensor being reduced: a copy of grad_full or
//                                          staging when C != A, else that buffer itself
//   reduced      (shard,)   C      1-3     the reduce-scatter's output. Stage 1: the window's
//                                          reduced slice (cast to A by finish_grad_sync). Stages
//                                          2-3: only when grad_shard already holds this window's
//                                          gradients or C != A; added into grad_shard, then freed
// clang-format on
//
// The stepped range is [0, padded) at stage 0 and the owned slice [r * shard, (r + 1) * shard)
// otherwise; owned_grad() is the gradient of exactly that range once the sync finished.
//
// Every rank must start the collectives of the same buckets in the same order.

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/zero/flat_buffer.h"
#include "core/zero/wait_clock.h"
#include "parallel/communicator.h"
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
  // Stage 3: a buffer of frozen parameters (units.h: make_frozen_buckets). It is sharded,
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

class HierarchicalReduce;
class NvmeParamSwapper;
class QuantizedReduceScatter;

class Bucket {
 public:
  // Lays the parameters out and makes them views of one new flat buffer (their values kept).
  Bucket(dist::FlatLayout layout, size_t unit, const BucketOptions& options);
  // Stage 3, after partitioned construction (partitioned_init.h): adopts the flat buffer the
  // parameters are already views of, released (with this rank's `shard`, (shard,)) or, for a
  // persistent bucket, full (`shard` undefined: keep_shard() takes it). Values are not read.
  Bucket(dist::FlatLayout layout, size_t unit, const BucketOptions& options, at::Tensor flat,
         at::Tensor shard);

  const dist::FlatLayout& layout() const { return layout_; }
  size_t unit() const { return unit_; }
  const BucketOptions& options() const { return options_; }
  bool persistent() const { return options_.persistent; }
  // Built by the adopting constructor: every rank built the same values, nothing to broadcast.
  bool from_partitioned_construction() const { return adopted_; }
  // The range of the flat buffer this rank steps (see the file comment).
  dist::Range stepped() const { return stepped_; }

  // ---- parameters ----
  const at::Tensor& params() const { return params_; }
  const at::Tensor& param_shard() const { return param_shard_; }
  // Where updated weights are written: the whole buffer (stage 0), the owned slice of it
  // (stages 1-2 and persistent stage-3 buffers) or the resident shard (stage 3).
  at::Tensor param_target() const;
  // Stage 3: the resident shard takes the owned slice of the full parameters (after the initial
  // broadcast, and when a gathered scope writes back); no-op while released. A shard on NVMe is
  // written to its file; a quantized one is quantized again.
  void keep_shard();
  // Frozen buffers: `full` (padded,) becomes the buffer's values (a checkpoint load). At stage 3
  // the buffer is released first and this rank's shard takes its slice (a quantized shard is
  // quantized from `full` as given, so fp32 values saved by values() come back bit for bit).
  void assign(const at::Tensor& full, WaitClock& clock);
  // The whole buffer's values as the model computes with them, (padded,) in the compute dtype;
  // a quantized shard's in fp32 (exact: what assign() needs to restore the same shards).
  // Collective over `comm` at stage 3; the buffer is left as it was (gathered or released).
  at::Tensor values(dist::Communicator& comm, WaitClock& clock);
  // Bytes of the resident shard (or of the whole buffer where it stays gathered) in memory.
  int64_t resident_bytes() const;
  // Stage 3, offload_param nvme: the shard moves to `slot` of `swapper` (written there now) and
  // leaves memory; every later read goes through the swapper.
  void move_shard_to(NvmeParamSwapper* swapper, size_t slot);
  bool shard_on_nvme() const { return swapper_ != nullptr; }
  // The stepped range's values for the optimizer (and checkpoint loads) to read and write:
  // param_target(), or for a shard on NVMe a host buffer holding it until checkin_target (read
  // from the file when `read`; otherwise only its padding is set and the caller writes the rest).
  // written: the values changed (a shard on NVMe goes back to its file).
  at::Tensor checkout_target(bool read);
  void checkin_target(bool written);
  // Stage 3, offload_param nvme: starts reading the shard ahead of its gather (no-op otherwise).
  void prefetch_shard();
  // Rebinds the parameters to a copy of the buffer in `dtype` (16-bit compute); a released buffer
  // stays released (only its shard is converted).
  void cast_params(at::ScalarType dtype);
  // After the step (or a checkpoint load): every full buffer that is resident takes every rank's
  // updated range: stages 1-2 and persistent stage-3 buffers all-gather their owned slices in
  // place; a gathered stage-3 buffer first copies its shard into its slice. No-op at stage 0 and
  // for a released stage-3 buffer (the next gather reads the shard).
  void publish_params(dist::Communicator& comm, WaitClock& clock);

  // ---- stage 3: gathering ----
  bool gathered() const { return gathered_; }
  bool gather_in_flight() const { return gather_work_ != nullptr; }
  // Allocates the full buffer and starts its all-gather; returns the bytes allocated (0 when it
  // was already gathered or in flight). With hpZ and a valid secondary copy, the all-gather runs
  // over `secondary` (the hpz group) from it instead of over `comm` from the shards.
  int64_t start_param_gather(dist::Communicator& comm, dist::Communicator* secondary = nullptr);
  void finish_param_gather(WaitClock& clock);
  // Frees the full buffer (waiting for an all-gather in flight first); returns the bytes freed.
  int64_t release_params(WaitClock& clock);
  int64_t full_param_bytes() const;
  // hpZ: bytes of the secondary copy held now (0 without one).
  int64_t secondary_bytes() const;

  // ---- gradients ----
  // Adds one parameter's gradient of this micro-step (from the post-accumulate hook); returns true
  // when it was the last parameter of the bucket still missing this micro-step.
  bool add_grad(size_t entry, const at::Tensor& grad);
  // Marks the bucket complete for this micro-step even if some parameters got no gradient.
  bool complete() const { return pending_ == 0; }
  void force_complete() { pending_ = 0; }
  // Starts this micro-step's (stages 2-3) or window's (stages 0-1) reduction; once per micro-step.
  void start_grad_sync(dist::Communicator& comm);
  void finish_grad_sync(WaitClock& clock);
  // Rearms the per-micro-step bookkeeping after backward.
  void next_micro_step();
  // The reduced gradient of the stepped range; undefined before the window's first sync at
  // stages 1-3 (stages 2-3 do not zero their shard buffer: the first reduce-scatter overwrites it).
  at::Tensor owned_grad() const;
  // Drops the window's gradients.
  void zero_grads();
  int64_t grad_bytes() const;

 private:
  void allocate_grads();
  void start_quantized_gather(dist::Communicator& comm, const at::Tensor& part);
  // quantized_storage: the all-gathers of stored blocks `q` and `scales` (one or more shards'
  // worth) over `comm`, into every shard's blocks in order.
  void start_stored_gather(dist::Communicator& comm, const at::Tensor& q, const at::Tensor& scales);
  // quantized_storage: `own` (this rank's slice, any floating dtype) quantized into the shard.
  void quantize_shard(const at::Tensor& own);
  // The all-gather of `part` (this rank's shard) into params_: over `comm`, or in two levels.
  void start_exact_gather(dist::Communicator& comm, const at::Tensor& part);
  // The second level of a two-level gather: `across` (this local index's slices of every node,
  // by node) all-gathered in the node and put in place in params_.
  void gather_in_node(const dist::NodeGroups& g, const at::Tensor& across, WaitClock& clock);
  // hpZ: the values changed (a step, a load, a write-back): the next gather reads the shards.
  void drop_secondary();
  // release_grad_shard: gives grad_shard_ its bytes if it holds none (zero_grads released them).
  void hold_grad_shard();

  dist::FlatLayout layout_;
  size_t unit_;
  BucketOptions options_;
  dist::Range stepped_;

  at::Tensor params_, param_shard_;
  NvmeParamSwapper* swapper_ = nullptr;  // offload_param nvme: where the shard lives
  size_t swap_slot_ = 0;
  bool gathered_ = true;
  bool adopted_ = false;
  dist::WorkPtr gather_work_;
  bool gather_on_side_ = false;      // the gather in flight was issued on the side copy stream
  bool gather_from_shards_ = false;  // the gather in flight reads the primary shards
  at::Tensor secondary_;             // hpZ: (padded / hpz,) this rank's part of the full buffer
  at::Tensor quant_shard_, quant_scales_;  // quantized_storage: the resident shard's blocks
  at::Tensor secondary_scales_;  // quantized_storage with hpZ: secondary_ holds int8 blocks
  // qwZ: the gather in flight's received blocks and scales, and the parts they hold.
  at::Tensor quant_recv_, scales_recv_;
  at::Tensor across_;  // hierarchical gather in flight: the shards of this local index, by node
  dist::WorkPtr scales_work_;
  int64_t quant_parts_ = 0;

  at::Tensor grad_full_, grad_shard_, staging_;
  at::Tensor reduced_;  // stage 1: the window's reduced slice; stages 2-3: a later micro-step's
  at::Tensor comm_in_;  // the tensor being reduced, in the communication dtype
  bool shard_has_grad_ = false;  // stages 2-3: grad_shard holds gradients of this window
  int pending_ = 0;              // parameters of this micro-step still without gradient
  bool launched_ = false;        // reduction of this micro-step started
  dist::WorkPtr grad_work_;
  std::shared_ptr<QuantizedReduceScatter> quantized_reduce_;  // qgZ: the reduction in flight
  std::shared_ptr<HierarchicalReduce> hierarchical_reduce_;   // stages 0-2 over the node groups
};

}  // namespace zt::zero
