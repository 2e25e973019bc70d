#pragma once
// EngineOptions: everything zt::Engine needs to know, as plain values (the engine reads no config
// file; core/config/engine_config.h builds these from a DeepSpeed-style config), and the engine's
// report of the model-state bytes it holds.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <c10/core/ScalarType.h>

#include "core/activations/activation_checkpoint_options.h"
#include "core/aio/aio_options.h"
#include "core/config/zero_config.h"
#include "core/defaults.h"
#include "core/precision/loss_scaler_options.h"
#include "core/profile/flops_profiler_options.h"
#include "optim/lr_schedule.h"
#include "optim/param_groups.h"
#include "optim/shard_optimizer.h"
#include "parallel/topology.h"

namespace zt {

// Parameter-group options with no no-decay pattern (DeepSpeed's default: all parameters decay).
inline optim::ParamGroupOptions every_parameter_decays() {
  optim::ParamGroupOptions o;
  o.no_decay_patterns.clear();
  return o;
}

// The zero_optimization block as the config reads it (core/config/zero_config.h: stage, bucket
// sizes, stage-3 thresholds, offload blocks, sub_group_size, with DeepSpeed's defaults), plus the
// rest of what the engine acts on. Offload blocks are honoured at every stage the engine can run
// them; the config applies DeepSpeed's rule (offload_optimizer from stage 1, offload_param at
// stage 3) when it builds these (core/config/engine_config.h).
struct EngineOptions : ZeroConfig {
  int gradient_accumulation_steps = 1;
  double gradient_clipping = 0.0;  // max global L2 norm; 0 = off
  // The asynchronous I/O of both NVMe offloads (DeepSpeed's aio block).
  aio::AioOptions aio;
  // Compute dtype of the model: fp32, or fp16/bf16 with an fp32 master of the owned slice. The
  // engine casts the model's floating parameters and buffers; inputs are the caller's.
  at::ScalarType compute_dtype = at::kFloat;
  LossScalerOptions fp16;  // loss scaling when compute_dtype is fp16
  // bf16.check_grad_overflow: false lets a bf16 step with inf/NaN gradients through at stages
  // 1-2 (core/precision/overflow_vote.h has the whole rule).
  bool bf16_check_grad_overflow = true;
  // Gradients accumulate (and are reduced) in this dtype: fp32 by default, also for bf16, where
  // DeepSpeed's bf16 accumulation is known to hurt convergence.
  at::ScalarType grad_accum_dtype = at::kFloat;
  // The master (the stepped copy of the parameters) and Adam's moments: fp32, or bf16 with
  // bf16.bf16_master_weights_and_grads / bf16_optimizer_states. A 16-bit master or state is
  // stepped in fp32 (widened a piece at a time) and rounded to nearest even when stored, in
  // every placement (core/zero/sharded_step.h); the master store then holds the moments.
  at::ScalarType master_dtype = at::kFloat;
  at::ScalarType optimizer_state_dtype = at::kFloat;
  optim::OptimizerSpec optimizer;
  optim::GroupHyper hyper;  // every group's defaults; hyper.lr = base lr
  // Per-parameter weight decay on/off and lr scale, from parameter names (optim/param_groups.h):
  // no-decay name substrings and layer-wise LR decay (llrd_decay). Its freeze_patterns must be
  // empty: frozen parameters are those with requires_grad false when the engine is built
  // (zt::initialize applies the config's `freeze` globs first). No pattern by default, so every
  // parameter decays, as in DeepSpeed.
  optim::ParamGroupOptions param_groups = every_parameter_decays();
  // The scheduler (optim/lr_schedule.h): each step's lr, and OneCycle's cycled betas; null: the
  // constant hyper.lr.
  std::shared_ptr<const optim::LrSchedule> lr_schedule;
  std::vector<std::string> units;  // submodule names that are stage-3 units
  // Gradient buckets whose reduction may be in flight at once (communication.
  // max_inflight_reductions): bounds the transient reduction buffers.
  int64_t max_inflight_reductions = defaults::kMaxInflightReductions;
  // communication_data_type: gradients are reduced in this dtype; unset: grad_accum_dtype.
  std::optional<at::ScalarType> communication_dtype;
  // DeepSpeed's prescale_gradients / gradient_predivide_factor: where the 1/N of the gradient
  // average is applied relative to the reduction (numerically an average either way).
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  // wall_clock_breakdown: forward / backward / step / communication-wait times, logged on rank 0
  // every steps_per_print optimizer steps.
  bool wall_clock_breakdown = false;
  // flops_profiler: per-step model FLOPs, TFLOP/s and MFU (Engine::step_flops()), and the
  // module-by-module report at its profile_step (core/profile/flops_profiler.h).
  profile::FlopsProfilerOptions flops_profiler;
  // The activation_checkpointing block: how zt::checkpoint_activations behaves in this process
  // (core/activations/activation_checkpoint.h); installed when the engine is built.
  ActivationCheckpointOptions activation_checkpointing;
  int steps_per_print = 10;
  // A CPU model's engine makes the host caching allocator (core/zero/host_caching_allocator.h)
  // LibTorch's CPU allocator for its lifetime; false keeps LibTorch's default (ZT_HOST_CACHE=0).
  bool host_cache = true;
  // The two-level gradient reduction at stages 0-2 (core/zero/hierarchical_reduce.h): kAuto takes
  // it over gloo and MPI when the ranks span several nodes, NCCL's own rings and trees being
  // topology-aware already (ZT_HIERARCHICAL_REDUCE: auto, 0 or 1).
  using TwoLevelReduce = dist::TopologyOptions::TwoLevel;
  TwoLevelReduce hierarchical_reduce = TwoLevelReduce::kAuto;
  // The config's sequence_parallel_size: ranks that split each batch's sequence (parallel/
  // sequence_exchange.h). The gradient average is then over world / sp ranks, as DeepSpeed divides
  // by its data-parallel size: the sp ranks of a group hold parts of one sample's gradient.
  int sequence_parallel_size = 1;
  // Tensor parallelism (the model's layers split over tensor groups of this many ranks, made by
  // the topology): the engine runs ZeRO over the ranks of this rank's tensor index, and the
  // gradient norm counts each slice once and each replicated parameter once.
  int tensor_parallel_size = 1;
  // Expert parallelism (expert_parallel.autoep_size: each layer's experts dealt over expert
  // groups of this many ranks, made by the topology): the engine runs ZeRO over the ranks of this
  // rank's expert index, sums the replicated parameters' gradients over the expert group too, and
  // averages over every rank (each reads its own batches).
  int expert_parallel_size = 1;
  // The parameters each rank of the topology's split group (tensor or expert,
  // dist::Topology::split) holds a different slice of, each with the dimension it is split along
  // (the model says which, e.g. LlamaForCausalLMImpl::tensor_split_parameters(): projections
  // under a tensor split, the fused experts along the expert dimension under an expert split);
  // the others are replicated over it. Rank t of the group holds the t-th part, so a checkpoint
  // joins them whatever split it is read at.
  std::map<std::string, int64_t> tensor_split_params;
  // Expert parameters dealt whole over the split group: each rank holds its own local experts as
  // modules of their own, named by their global index (DeepSpeed's MoE layer, through
  // python/zerotorch/native_moe.py), so the same position of the model holds another parameter
  // under another name on each rank of the group. Like tensor_split_params they are this index's
  // own (never summed or broadcast over the group); a checkpoint and an export hold each under
  // its own name (Engine::dealt_names).
  std::set<std::string> dealt_params;
  // Not replicated over the split group: a slice, or a parameter dealt whole.
  bool split_over_group(const std::string& name) const {
    return tensor_split_params.count(name) > 0 || dealt_params.count(name) > 0;
  }
};

// The engine's one check of its options (whoever filled them: engine_options_from_config, or a
// program by hand): a value no engine can run with is a zt::Error naming its key.
void check_engine_options(const EngineOptions& options);

// Sets the options the environment's behaviour switches carry (base/env_vars.h: ZT_HOST_CACHE,
// ZT_HIERARCHICAL_REDUCE); a bad value is a one-line error naming the variable. Called where
// options are built (engine_options_from_config, and programs that fill EngineOptions
// themselves), never by the engine.
void read_environment_switches(EngineOptions& options);

// The process groups a job with this zero_optimization block runs over (parallel/topology.h):
// hybrid sharding, hpZ and qgZ at stage 3, the hierarchical reduction at stages 0-2, and the
// sequence-parallel groups. Every key that asks for a group is read here only.
dist::TopologyOptions topology_options(const ZeroConfig& zero,
                                       EngineOptions::TwoLevelReduce hierarchical_reduce,
                                       int sequence_parallel_size, int tensor_parallel_size = 1,
                                       int expert_parallel_size = 1);

// Bytes this rank holds for model states, by the engine's own accounting.
struct MemoryReport {
  // compute parameters held persistently (shards at stage 3, plus hpZ secondary copies now held)
  int64_t param_bytes = 0;
  // frozen parameters (requires_grad false): stage-3 shards (int8 blocks and scales with
  // zero_quantized_nontrainable_weights, plus hpZ copies now held), whole ones otherwise
  int64_t frozen_param_bytes = 0;
  int64_t grad_bytes = 0;             // gradient accumulation buffers
  int64_t optimizer_state_bytes = 0;  // optimizer state (m, v, ...) of this rank
  int64_t master_bytes = 0;           // separate fp32 master copy (0 when params are the master)
  int64_t gathered_param_bytes = 0;   // stage 3: full buffers currently gathered
  int64_t peak_gathered_param_bytes = 0;
  int64_t nvme_bytes = 0;              // NVMe offload: bytes of this rank's swap files (not in RAM)
  int64_t nvme_buffer_bytes = 0;       // NVMe offload: host buffers the chunks stream through
  int64_t model_state_bytes() const {  // in host/device memory (nvme_bytes excluded)
    return param_bytes + frozen_param_bytes + grad_bytes + optimizer_state_bytes + master_bytes +
           nvme_buffer_bytes;
  }
};

// Stage 3 since the engine began: bytes of parameters its gathers rebuilt, and bytes of routed
// units' experts it left out because no rank of their ZeRO group routed rows to them
// (core/zero/call_unit.h). Zero below stage 3.
struct GatherTraffic {
  int64_t gathered_bytes = 0;
  int64_t unrouted_bytes = 0;
};

}  // namespace zt
