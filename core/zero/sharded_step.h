#pragma once
// The sharded optimizer step: what happens on the accumulation boundary, after every bucket's
// gradient was reduced. Per bucket, this rank steps only its stepped range (the whole buffer at
// stage 0, its owned slice otherwise):
//
//   1. one read of the owned gradients: the global sum of squares of their raw values (float64,
//      all-reduced at stages 1-3). It is also the overflow vote wherever DeepSpeed skips such a
//      step (core/precision/overflow_vote.h: fp16 always, fp32 at stages 1-3, bf16 unless
//      check_grad_overflow is false at stages 1-2): inf/NaN anywhere makes it non-finite on every
//      rank, so every rank skips together (the fp16 loss scaler then backs off)
//   2. the norm: sqrt of that sum times |post_reduce_scale / loss_scale|, and the clipping factor
//      from it (gradient_clipping)
//   3. the optimizer on the fp32 master of the range, with per-parameter weight decay and lr
//      (optim/param_groups.h: no-decay patterns, layer-wise LR decay), writing the 16-bit copy in
//      the same pass where it can. The gradients are never rewritten: the average over ranks, the
//      loss-scale undo and the clipping factor reach the optimizer as one factor
//      (GroupHyper::grad_scale) that its pass multiplies in, so a step reads the gradient twice
//      and writes it never
//   4. publish: stages 1-2 and persistent stage-3 buffers all-gather the updated slices into the
//      full parameters (Bucket::publish_params)
//
// What the optimizer steps with and the norm it clips by come from a part chosen once from the
// optimizer (core/zero/step_gradients.h): the owned gradients as they are, or Muon's
// orthogonalised updates (core/zero/muon_gradients.h), whose norm replaces the raw one.
//
// The fp32 master and the optimizer state live in a master store (core/zero/master_store.h): on
// the model's device, in host memory with optimizer offload, or in NVMe files. The step is one
// loop over the store's chunks, whatever the placement: per chunk the gradient comes to the
// master's device (with the model on a GPU and the master in host memory, through the pinned,
// asynchronous copies of core/zero/host_offload.h), the optimizer steps the chunk with the state
// the store holds for it (or its own), and the updated parameters go where the bucket keeps them.
//
// Memory per rank for the optimizer side (Ψ_r = elements this rank steps): master 4 Ψ_r bytes
// when separate, plus the optimizer's state (Adam: 8 Ψ_r). With offload_optimizer.device nvme
// both live in files instead (12 Ψ_r bytes on disk) and stream chunk by chunk through a few host
// buffers (core/zero/nvme_optimizer.h); the optimizer then keeps no state between steps.

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/engine_options.h"
#include "core/precision/loss_scaler.h"
#include "core/zero/bucket.h"
#include "core/zero/master_store.h"
#include "core/zero/step_gradients.h"
#include "core/zero/wait_clock.h"
#include "optim/param_groups.h"
#include "optim/shard_optimizer.h"
#include "parallel/communicator.h"

namespace zt {
class HostOffload;
}

namespace zt::zero {

class SerialWorker;

struct StepOutcome {
  bool skipped = false;    // inf/NaN gradients: nothing was updated
  double grad_norm = 0.0;  // global norm before clipping (0 when skipped)
};

class ShardedStep {
 public:
  // post_reduce_scale: the part of the gradient average not applied before the reduction
  // (1/N by default, 1 with prescale_gradients, f/N with gradient_predivide_factor f).
  // comm: the ranks the state is sharded over. replica: with hybrid sharding (mics_shard_size),
  // the ranks holding the same shard in the other groups; their owned gradients are summed over
  // it once per step, before the norm (null: one group). world_rank names this rank's files.
  // spill_grads (offload_optimizer nvme, gradients in host memory, one group, no split): the
  // buckets' reduced gradients wait in the NVMe chunk files (core/zero/grad_spill.h), their
  // norm is taken as they are written, and each chunk's comes back with it at the step.
  ShardedStep(const EngineOptions& options, std::vector<std::unique_ptr<Bucket>>& buckets,
              dist::Communicator& comm, dist::Communicator* replica, int world_rank,
              WaitClock& clock, double post_reduce_scale, bool spill_grads = false);
  ~ShardedStep();
  ShardedStep(const ShardedStep&) = delete;
  ShardedStep& operator=(const ShardedStep&) = delete;

  // Tensor or expert parallelism (`split`: the topology's split group): the gradient norm sums
  // the squares of options.tensor_split_params over `split` too, and counts the replicated
  // parameters once. replicated_differ (expert parallelism, whose ranks read different tokens):
  // the replicated parameters' owned gradients are first summed over `split`, once per step,
  // so every rank of it steps them alike; under a tensor split they are already the same there.
  void set_split_group(dist::Communicator* split, bool replicated_differ);

  // Takes the separate fp32 masters from the current parameter values. Call once, after every
  // rank holds the same parameters and before they are cast to the compute dtype.
  void init_masters();
  // The step described in the file comment, with every group's hyperparameters taken from
  // `hyper` (the engine's, with this step's scheduled lr and betas). step_index names the step
  // in errors.
  StepOutcome step(const optim::GroupHyper& hyper, DynamicLossScaler* scaler, int64_t step_index);

  // Bucket b's reduction of the step's last micro-batch ended (the engine calls it then, from
  // backward, with the hyperparameters step() will get). Where the master is in host memory and
  // the gradient the optimizer steps with is final already (downloads_at_reduction()) and fp32
  // (grad_accum_dtype's default), its copy to the host starts now, on the side stream, and
  // overlaps the rest of backward; update() then only waits for it. Where, moreover, nothing in
  // the step depends on the other buckets (steps_at_reduction()), the bucket's host optimizer step
  // and its parameters' copy back are posted to a worker thread too, so they overlap the rest of
  // backward as well; step() waits for them and publishes.
  void gradient_reduced(size_t b, const optim::GroupHyper& hyper);
  // Whether gradient_reduced starts the copies: a model on an accelerator with its master in
  // host memory (HostOffload), owned gradients as the optimizer steps them (not Muon's), and
  // nothing that changes them between backward and the step (a sum across MiCS replicas or over
  // an expert split, gradients spilled to NVMe). Otherwise the copies start in the step.
  bool downloads_at_reduction() const;
  // Whether gradient_reduced also steps the bucket: downloads_at_reduction(), no overflow vote
  // (core/precision/overflow_vote.h: bf16 with check_grad_overflow false at stages 1-2), no
  // gradient clipping, CpuAdam on an fp32 master in memory, no SWA. A backward on the
  // accumulation boundary then takes part of the step: an exception in it leaves the buckets
  // already stepped stepped.
  bool steps_at_reduction() const;
  // A backward on the boundary failed: waits for the host steps gradient_reduced posted (their
  // errors dropped: the backward's own is the one reported), orders the device after their copies
  // and forgets the step's early work, so that nothing runs on behind the caller's back while it
  // handles the error (an emergency checkpoint, closing the engine). The buckets already stepped
  // stay stepped.
  void abandon_reductions();

  // Where the fp32 masters and the optimizer state live; checkpoints stream them through it.
  MasterStore& masters() const { return *store_; }
  optim::ShardOptimizer* optimizer(size_t b) const { return slots_[b].optimizer.get(); }
  // After masters were overwritten (checkpoint load): casts them into the parameters (the stepped
  // ranges) without publishing.
  void copy_masters_to_params();
  // After parameters were overwritten (GatheredParameters with write-back): takes the masters
  // from them.
  void copy_params_to_masters();

  int64_t optimizer_state_bytes() const;
  int64_t master_bytes() const;
  int64_t nvme_bytes() const;         // swap files on disk
  int64_t nvme_buffer_bytes() const;  // host buffers they stream through

 private:
  at::Tensor tensor_sum_of_squares(const at::Tensor& whole);
  struct Slot {
    std::unique_ptr<optim::ShardOptimizer> optimizer;
    std::vector<optim::ParamInfo> params;  // entries in flat-buffer coordinates
    optim::ParamGrouping grouping;         // per entry: decay flag and lr scale
  };

  // Hybrid sharding: sums every bucket's owned gradient over the replica group.
  void reduce_across_replicas();
  // Expert parallelism: sums the replicated parameters' owned gradients over the split group.
  void reduce_replicated_over_split();
  // Sum of squares of every rank's owned gradients (all-reduced at stages 1-3).
  double global_grad_norm_squared();
  // Bucket b's group ranges for this step, every one with the step's gradient factor.
  std::vector<optim::GroupRange> groups(size_t b, const optim::GroupHyper& hyper,
                                        double grad_scale) const;
  // Steps every chunk of the buckets in `stepped` and publishes them.
  void update(const std::vector<size_t>& stepped, double grad_scale,
              const optim::GroupHyper& hyper);
  // One chunk of the step into `target`, its part of the bucket's stepped range (see the
  // definition).
  void step_chunk(MasterChunk& c, const at::Tensor& target,
                  const std::vector<optim::GroupRange>& bucket_ranges, int64_t step_before);
  // Steps one chunk of a 16-bit master (see the definition) with the chunk's gradient `grad` and
  // writes it into `target`.
  void step_widened(MasterChunk& c, optim::ShardOptimizer& opt, const at::Tensor& grad,
                    const std::vector<optim::GroupRange>& bucket_ranges, int64_t step_before,
                    const at::Tensor& target);
  std::string overflow_culprits() const;
  // The model's device: where gradients are reduced.
  c10::Device compute_device() const;

  const EngineOptions& options_;
  std::vector<std::unique_ptr<Bucket>>& buckets_;
  dist::Communicator& comm_;
  dist::Communicator* replica_;
  dist::Communicator* tensor_ = nullptr;          // the split group (tensor or expert)
  bool replicated_differ_ = false;                // set_split_group
  std::unordered_set<std::string> tensor_split_;  // options_.tensor_split_params
  WaitClock& clock_;
  double post_reduce_scale_;
  std::vector<Slot> slots_;
  std::unique_ptr<MasterStore> store_;
  // What the optimizer steps with, and the norm it clips by.
  std::unique_ptr<StepGradients> step_grads_;
  // The master in host memory of a model on a GPU: gradients come over, parameters go back,
  // through pinned buffers on a side stream.
  std::unique_ptr<HostOffload> host_offload_;
  std::vector<bool> downloading_;        // by bucket: gradient_reduced started its copy this step
  std::vector<bool> stepped_early_;      // by bucket: gradient_reduced stepped it this step
  optim::OptimizerKind optimizer_kind_;  // the resolved kind every bucket steps with
  // The host steps posted by gradient_reduced (created at the first).
  std::unique_ptr<SerialWorker> early_;
};

}  // namespace zt::zero
