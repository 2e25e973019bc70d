#pragma once
// zt::zero::Bucket: one flat buffer of parameters (core/zero/flat_buffer.h) and the ZeRO state
// kept for it. The four verbs of overlap are the only way communication starts and ends
// (docs/DESIGN.md, "The overlap timeline"):
//
// clang-format off
//   start_grad_sync / finish_grad_sync        reduce gradients and fold the result into the
//                                             accumulation buffer (grad_reduction.h)
//   start_param_gather / finish_param_gather  stage 3: rebuild the full parameters from the
//                                             shards (shard_gather.h)
//   release_params                            stage 3: free the full parameters again
// clang-format on
//
// The bucket owns the full buffer `params` (every parameter is a view of it; at stage 3 its
// storage is released between uses, except in a persistent buffer) and delegates the rest to
// the parts plan_bucket (bucket_plan.h) chose from its options when it was built: where the
// gradients accumulate and how they are reduced, where a released buffer's shard lives
// (param_shard.h), how it is gathered, and how updated slices reach every rank.
//
// The stepped range is [0, padded) at stage 0 and the owned slice [r * shard, (r + 1) * shard)
// otherwise; owned_grad() is the gradient of exactly that range once the sync finished. Every
// rank must start the collectives of the same buckets in the same order.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/zero/bucket_options.h"
#include "core/zero/bucket_plan.h"
#include "core/zero/flat_buffer.h"
#include "core/zero/wait_clock.h"
#include "parallel/communicator.h"

namespace zt::zero {

class NvmeParamSwapper;

class Bucket {
 public:
  // Lays the parameters out and makes them views of one new flat buffer (their values kept).
  Bucket(dist::FlatLayout layout, size_t unit, const BucketOptions& options);
  // Stage 3, after partitioned construction (partitioned_init.h): adopts the flat buffer the
  // parameters are already views of, released (with this rank's `shard`, (shard,)) or, for a
  // persistent bucket, full (`shard` undefined). Values are not read.
  Bucket(dist::FlatLayout layout, size_t unit, const BucketOptions& options, at::Tensor flat,
         at::Tensor shard);

  const dist::FlatLayout& layout() const { return layout_; }
  size_t unit() const { return unit_; }
  const BucketOptions& options() const { return options_; }
  bool persistent() const { return options_.persistent; }
  // Released between uses (a stage-3 buffer that is not persistent).
  bool sharded() const { return parts_.shard != nullptr; }
  // Built by the adopting constructor: every rank built the same values, nothing to broadcast.
  bool from_partitioned_construction() const { return adopted_; }
  // The range of the flat buffer this rank steps (see the file comment).
  dist::Range stepped() const { return parts_.stepped; }

  // ---- parameters ----
  const at::Tensor& params() const { return params_; }
  // Where updated weights are written: the stepped range of the full buffer, or the resident
  // shard of a sharded buffer.
  at::Tensor param_target() const;
  // A sharded buffer's shard takes the owned slice of the full parameters (after the initial
  // broadcast, and when a gathered scope writes back); no-op while released.
  void keep_shard();
  // Frozen buffers: `full` (padded,) becomes the buffer's values (a checkpoint load). A sharded
  // buffer is released first and its shard takes its slice (a quantized shard is quantized from
  // `full` as given, so fp32 values saved by values() come back bit for bit).
  void assign(const at::Tensor& full, WaitClock& clock);
  // The whole buffer's values as the model computes with them, (padded,) in the compute dtype;
  // a quantized shard's in fp32 (exact: what assign() needs to restore the same shards).
  // Collective over `comm` when sharded; the buffer is left as it was (gathered or released).
  at::Tensor values(dist::Communicator& comm, WaitClock& clock);
  // Bytes of the resident shard (or of the whole buffer where it stays gathered) in memory.
  int64_t resident_bytes() const;
  // offload_param nvme: the shard moves to `slot` of `swapper` (written there now) and leaves
  // memory; every later read goes through the swapper.
  void move_shard_to(NvmeParamSwapper* swapper, size_t slot);
  bool shard_on_nvme() const { return sharded() && parts_.shard->on_nvme(); }
  // The stepped range's values for the optimizer (and checkpoint loads) to read and write:
  // param_target(), or for a shard on NVMe a host buffer holding it until checkin_target (read
  // from the file when `read`; otherwise only its padding is set and the caller writes the rest).
  // written: the values changed (a shard on NVMe goes back to its file).
  at::Tensor checkout_target(bool read);
  void checkin_target(bool written);
  // offload_param nvme: starts reading the shard ahead of its gather (no-op otherwise).
  void prefetch_shard();
  // Rebinds the parameters to a copy of the buffer in `dtype` (16-bit compute); a released buffer
  // stays released (only its shard is converted).
  void cast_params(at::ScalarType dtype);
  // After the step (or a checkpoint load): every full buffer that is resident takes every rank's
  // updated range (a gathered sharded buffer first copies its shard into its slice). No-op at
  // stage 0 and for a released buffer (the next gather reads the shard).
  void publish_params(dist::Communicator& comm, WaitClock& clock);

  // ---- stage 3: gathering ----
  bool gathered() const { return gathered_; }
  // Allocates the full buffer and starts its all-gather; returns the bytes allocated (0 when it
  // was already gathered or in flight). With hpZ and a valid secondary copy, the all-gather runs
  // over `secondary` (the hpz group) from it instead of over `comm` from the shards.
  // only: rebuild just these ranges of the full buffer (sorted, disjoint), where the gather
  // allows it (ShardGather::start_ranges); the rest holds no values until a whole gather or the
  // release. A whole gather of a partly gathered buffer gathers it again.
  int64_t start_param_gather(dist::Communicator& comm, dist::Communicator* secondary = nullptr,
                             const std::vector<dist::Range>* only = nullptr);
  // Gathered (or in flight) with only some ranges rebuilt.
  bool partly_gathered() const { return partial_; }
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
  // Undefined too where the gradient is spilled (grad_spill.h): has_grad() says whether the
  // window has one, load_owned_grad() reads a copy back.
  at::Tensor owned_grad() const { return parts_.grads ? parts_.grads->owned() : at::Tensor(); }
  bool has_grad() const { return parts_.grads && parts_.grads->has_grad(); }
  // The spilled gradient's sum of squares (GradReduction::spilled_sum_of_squares).
  std::optional<double> spilled_grad_squares() const {
    return parts_.grads ? parts_.grads->spilled_sum_of_squares() : std::nullopt;
  }
  at::Tensor load_owned_grad() const {
    return parts_.grads ? parts_.grads->load_owned() : at::Tensor();
  }
  // Stages 2-3, a CPU model: the reduced gradient waits in `spill` as slot `slot`.
  void spill_grads_to(GradSpill* spill, size_t slot) {
    if (parts_.grads) parts_.grads->spill_to(spill, slot);
  }
  // Drops the window's gradients.
  void zero_grads() {
    if (parts_.grads) parts_.grads->zero();
  }
  int64_t grad_bytes() const { return parts_.grads ? parts_.grads->bytes() : 0; }

 private:
  at::Tensor own_slice() const;
  bool gather_in_flight() const { return parts_.gather && parts_.gather->in_flight(); }

  dist::FlatLayout layout_;
  size_t unit_;
  BucketOptions options_;
  at::Tensor params_;
  BucketParts parts_;
  bool gathered_ = true;
  bool partial_ = false;  // start_param_gather's `only`
  bool adopted_ = false;
  int pending_ = 0;        // parameters of this micro-step still without gradient
  bool launched_ = false;  // reduction of this micro-step started
};

// Every rank steps whole buffers (stage 0, or one rank): each holds the whole reduced gradient,
// so a sum over the stepped ranges needs no all-reduce.
bool steps_whole_buffers(const std::vector<std::unique_ptr<Bucket>>& buckets);

}  // namespace zt::zero
