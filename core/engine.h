#pragma once
// zt::Engine: ZeRO stages 0-3 around any torch::nn::Module (docs/DESIGN.md: "ZeRO" and
// "Equivalence").
//
// A training loop reads like DeepSpeed's:
//
//   zt::Engine engine(model, options, comm);
//   for (auto& batch : loader) {
//     at::Tensor loss = engine.forward([&] { return loss_fn(model->forward(batch.x), batch.y); });
//     engine.backward(loss);   // scales by 1/gradient_accumulation_steps, reduces gradients
//     engine.step();           // optimizer step on the accumulation boundary only
//   }
//
// Memory layout per rank (N ranks, Ψ trainable parameters, D = compute dtype, A = gradient
// accumulation dtype, fp32 by default): trainable parameters are cut into flat buffers
// (core/zero/flat_buffer.h; at most reduce_bucket_size elements each, padded to a multiple of N);
// rank r owns slice r of each buffer.
//
//   stage 0: params (D, padded Ψ), grads (A, padded Ψ), optimizer state for all of Ψ
//   stage 1: params (D, padded Ψ), grads (A, padded Ψ), optimizer state for the owned slices
//   stage 2: params (D, padded Ψ), grads (A, owned slices), optimizer state for the owned slices
//   stage 3: params (D, owned slices; a unit's full buffers only while gathered), grads and
//            optimizer state for the owned slices
//
// In fp32 training without offload, the fp32 master weights are the parameters themselves
// (docs/DESIGN.md: "In fp32 training ... K becomes 8"); otherwise a separate fp32 master of the
// owned slice exists (counted with the optimizer state).
//
// Collective order: gradients are reduced bucket by bucket as autograd finishes each bucket
// (post-accumulate-grad hooks), so communication overlaps the rest of backward. Every rank must
// run the same graph (the same parameters receive gradients): buckets that never complete are
// reduced at the end of backward in bucket order.
//
// Stage 3: parameters of a unit (a submodule named in `units`, called through zt::call_unit)
// are gathered just before its forward and its backward and released after each; the next unit
// is prefetched. Parameters outside every unit form the root unit, gathered for the whole of
// forward and backward: in stage 3 run the model inside engine.forward(...).
//
// On a GPU (the model's parameters on CUDA, the nccl backend): the flat buffers, gradients, fp32
// masters and optimizer state stay on the device (FusedAdam for Adam/AdamW), except with
// optimizer offload, where masters and state live in pinned host memory (core/zero/host_offload.h),
// and with offload_param, where the stage-3 shards live in host memory or files
// (core/zero/bucket.h, core/zero/nvme_params.h) and are copied to the device just before their
// all-gather. Collectives run on the communicator's own stream, and Work::wait() only makes
// LibTorch's current (compute) stream wait for them, so the host never blocks on communication:
//
//   compute  ..grad bucket k ready..|bwd of earlier layers....................|wait RS k|add
//   nccl                            └ready┘ reduce-scatter bucket k ──────────┘
//
//   compute  |fwd unit i (gathered)|wait AG i+1|fwd unit i+1|...
//   nccl      └ all-gather unit i+1 (prefetch, issued before unit i's kernels) ┘
//
// A collective starts after the compute work queued before it (an event recorded on the
// compute stream), and its tensors are marked used on the nccl stream, so the caching allocator
// does not hand their memory out again (a released stage-3 buffer, a freed staging bucket) before
// the collective finished. Overflow flags and the gradient norm are voted on the device and read
// back once per step.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "core/engine_options.h"
#include "core/precision/loss_scaler.h"
#include "core/zero/flat_buffer.h"

namespace zt {

namespace dist {
class Communicator;
struct Topology;
}  // namespace dist
namespace profile {
struct StepFlops;
}
namespace zero {
struct BucketOptions;
class PartitionedInit;
class MasterStore;
struct PartitionOptions;
}  // namespace zero

// The engine's parts (buckets, gather, gradient sync, sharded step; core/zero/) live behind
// Engine::Impl in core/engine.cpp, so a program that includes this header does not rebuild when
// a ZeRO part changes.
class Engine {
 public:
  // `partitioned`: the model was built through it (core/zero/partitioned_init.h, stage 3): its
  // flat buffers and this rank's shards are adopted as they are, without the broadcast from rank
  // 0 (every rank built the same values). Null or empty: the model is whole on every rank.
  // `topology`: the process groups (parallel/topology.h) made over `comm` by the training setup;
  // null: the engine makes them from its options and the launch environment.
  Engine(std::shared_ptr<torch::nn::Module> model, EngineOptions options,
         std::shared_ptr<dist::Communicator> comm,
         std::shared_ptr<zero::PartitionedInit> partitioned = nullptr,
         std::shared_ptr<const dist::Topology> topology = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Runs fn (the model's forward and the loss) with the stage-3 root unit gathered.
  at::Tensor forward(const std::function<at::Tensor()>& fn);
  // loss.backward() with loss scaled by 1/gradient_accumulation_steps, then the end of this
  // micro-step's gradient reduction. scale_wrt_gas false: the loss as it is (DeepSpeed's
  // backward(loss, scale_wrt_gas=False), which the Hugging Face Trainer uses when its loss is
  // already divided over the accumulation window's tokens).
  void backward(const at::Tensor& loss, bool scale_wrt_gas = true);
  // Call after every backward: steps the optimizer on the accumulation boundary only.
  void step();
  // True when the current micro-step (the next backward) completes an accumulation window.
  bool is_gradient_accumulation_boundary() const;
  // Drops gradients accumulated so far in this window.
  void zero_grad();

  // The lr the next optimizer step takes (the scheduler's, or the optimizer's constant lr).
  double get_lr() const;
  // Every group's hyperparameters for the next optimizer step: the optimizer's, with the
  // scheduler's lr and, for OneCycle with cycle_momentum, its betas.
  optim::GroupHyper step_hyper() const;
  // Optimizer boundaries passed, including steps skipped for inf/NaN gradients.
  int64_t global_step() const;
  int64_t skipped_steps() const;
  // Current fp16 loss scale (1 when not in fp16).
  double loss_scale() const;
  const DynamicLossScaler* loss_scaler() const;
  DynamicLossScaler* mutable_loss_scaler();
  int64_t micro_steps() const;
  // Global gradient norm before clipping, of the last optimizer step.
  double last_grad_norm() const;
  void train(bool on = true);
  void eval() { train(false); }

  MemoryReport memory() const;
  GatherTraffic gather_traffic() const;
  // Seconds this rank spent blocked in Work::wait() (gradient reductions, parameter gathers and
  // publishes, norm and overflow votes) since the last reset: communication not hidden behind
  // computation.
  double comm_wait_seconds() const;
  void reset_comm_wait();
  // With flops_profiler enabled: the last optimizer step's FLOPs, TFLOP/s and MFU on this rank;
  // null otherwise.
  const profile::StepFlops* step_flops() const;

  // ---- access for checkpoints (core/checkpoint*) ----
  // This rank's part of one flat buffer: the layout (parameter names and ranges), the range of
  // the flat buffer this rank steps (the whole buffer at stage 0, slice `rank` otherwise), the
  // fp32 master values of that range (a separate master, or a view of the fp32 parameters /
  // stage-3 shard, so writing into it changes the model once sync_params_from_masters() runs),
  // and the optimizer stepping it (state laid out like master). With offload_optimizer.device
  // nvme, master is undefined and the optimizer holds only its step count: master and state are
  // streamed chunk by chunk through master_store() instead.
  struct ShardState {
    const dist::FlatLayout* layout = nullptr;
    dist::Range stepped;
    at::Tensor master;
    optim::ShardOptimizer* optimizer = nullptr;
  };
  std::vector<ShardState> shard_states();
  // Where the masters and the optimizer state live (core/zero/master_store.h): checkpoints
  // stream every placement through it, chunk by chunk.
  zero::MasterStore& master_store() const;
  // After masters were overwritten (checkpoint load): casts them into the compute parameters and
  // re-gathers full parameters where the stage keeps them (collective: every rank calls it).
  void sync_params_from_masters();
  // Counters restored from a checkpoint; gradients accumulated so far are dropped.
  void restore_counters(int64_t global_step, int64_t skipped_steps, int64_t micro_steps);
  std::shared_ptr<torch::nn::Module> model() const;
  const dist::Communicator& communicator() const;
  // Collectives are non-const; code that runs them on the engine's group (checkpoints) uses this.
  dist::Communicator& communicator();
  // The ranks the model states are sharded over: communicator() itself, or with hybrid sharding
  // (zero_optimization.mics_shard_size at stage 3) this rank's group of mics_shard_size
  // consecutive ranks. Its rank and size are the ones the flat-buffer layouts use.
  const dist::Communicator& shard_communicator() const;
  // Which copy of the sharded state this rank holds: 0 without hybrid sharding, else its group
  // (rank / mics_shard_size). Checkpoints are written by the ranks of copy 0.
  int replica_index() const;
  // The process groups the engine runs over (parallel/topology.h); a sequence-parallel model
  // takes its exchange group from topology().sequence.
  const dist::Topology& topology() const;
  const EngineOptions& options() const;
  // Under tensor (expert) parallelism, each split parameter's extent along its split dimension on
  // every rank of the tensor (expert) group (EngineOptions::tensor_split_params; equal or, for
  // uneven head counts, not); checkpoints and 16-bit exports join and cut slices by them.
  const std::map<std::string, std::vector<int64_t>>& tensor_slices() const;
  // Each dealt parameter's name on every rank of the split group, by this rank's name
  // (EngineOptions::dealt_params: the same position of the model, with the same shape, holds
  // rank r's own parameter under names[r]); checkpoints and 16-bit exports hold all of them.
  const std::map<std::string, std::vector<std::string>>& dealt_names() const;

  // Visits every parameter with its full values in the compute dtype, one stage-3 unit at a time
  // (gathered, visited, released: peak memory ~ the largest unit), then the frozen parameters.
  // Collective at stage 3: every rank calls it. Order: as named_parameters_by_unit().
  void for_each_full_parameter(
      const std::function<void(const std::string&, const at::Tensor&)>& fn);
  // Names and parameter tensors in for_each_full_parameter's order: the declared units, the root
  // unit, then frozen parameters. Shapes and dtypes are valid at any time; at stage 3 values
  // only inside a gathered scope.
  std::vector<std::pair<std::string, at::Tensor>> named_parameters_by_unit() const;
  // Visits every frozen parameter with the values the model computes with: a stage-3 frozen
  // buffer is gathered one at a time (quantized shards rebuilt in fp32, exactly as stored), the
  // rest as they are. Collective over shard_communicator() at stage 3. For checkpoints.
  void for_each_frozen_value(const std::function<void(const std::string&, const at::Tensor&)>& fn);
  // The frozen parameters named in `values` take those values (a checkpoint load); a stage-3
  // frozen shard takes its slice (quantized again when stored quantized). Collective like
  // for_each_frozen_value.
  void load_frozen(const std::map<std::string, at::Tensor>& values);

  // RAII scope in which every parameter holds its full values (stage 3 gathers, others no-op),
  // for evaluation, EMA or export in user code. With write_back, changes made to the parameters
  // inside the scope are copied into this rank's shards (and master) when it ends; every rank
  // must then make the same change.
  class GatheredParameters {
   public:
    GatheredParameters(Engine& engine, bool write_back = false);
    ~GatheredParameters();
    GatheredParameters(const GatheredParameters&) = delete;
    GatheredParameters& operator=(const GatheredParameters&) = delete;

   private:
    Engine& engine_;
    bool write_back_;
  };

 private:
  struct Impl;
  void make_frozen_buckets(const zero::BucketOptions& trainable);
  void check_partitioned(const zero::PartitionOptions& p) const;
  void cast_model_to_compute_dtype();
  void broadcast_initial_state();
  void broadcast_replicated_over_split();
  void move_param_shards_to_nvme();
  void on_bucket_complete(size_t bucket);
  void finish_backward();
  void log_breakdown();

  std::unique_ptr<Impl> impl_;
};

}  // namespace zt
