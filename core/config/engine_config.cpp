#include "core/config/engine_config.h"

#include <map>

#include "base/error.h"
#include "base/logging.h"
#include "optim/lr_schedule.h"
#include "optim/muon.h"

namespace zt {
namespace {

at::ScalarType to_scalar(DType d) {
  switch (d) {
    case DType::kFp32: return at::kFloat;
    case DType::kFp16: return at::kHalf;
    case DType::kBf16: return at::kBFloat16;
  }
  return at::kFloat;
}

// Muon's two halves (optim/muon.h): the auxiliary Adam's betas and eps, Muon's momentum, and each
// half's lr as a factor on the scheduled lr.
void muon_options(const OptimizerConfig& oc, EngineOptions& o) {
  const MuonConfig& m = oc.muon;
  o.hyper.beta1 = m.betas.size() > 0 ? m.betas[0] : 0.9;
  o.hyper.beta2 = m.betas.size() > 1 ? m.betas[1] : 0.95;
  o.hyper.eps = m.eps;
  o.hyper.momentum = m.momentum;
  o.optimizer.muon.ns_method = optim::ns_method_from_name(m.ns_method);
  o.optimizer.muon.muon_lr_scale = m.muon_lr >= 0 ? m.muon_lr / oc.lr : 1.0;
  o.optimizer.muon.adam_lr_scale = m.adam_lr >= 0 ? m.adam_lr / oc.lr : 1.0;
}

}  // namespace

EngineOptions engine_options_from_config(const Config& c, std::vector<std::string> units) {
  if (!c.pending_autos.empty()) {
    std::string keys;
    for (const auto& k : c.pending_autos) keys += (keys.empty() ? "" : ", ") + k;
    ZT_THROW(keys,
             ": still \"auto\"; resolve it with zt::resolve_program_autos(config, "
             "{hidden_size, total_steps}) before building the engine (zt::initialize does)");
  }
  EngineOptions o;
  // The zero_optimization block as read; DeepSpeed reads an offload block only from the stage
  // that shards what it moves (check_config warned that it is ignored below).
  static_cast<ZeroConfig&>(o) = c.zero_optimization;
  if (o.stage < 1) o.offload_optimizer.device = OffloadDevice::kNone;
  if (o.stage < 3) o.offload_param.device = OffloadDevice::kNone;
  o.aio = c.aio;
  o.gradient_accumulation_steps = static_cast<int>(c.gradient_accumulation_steps);
  o.gradient_clipping = c.gradient_clipping;
  if (c.fp16.enabled) {
    o.compute_dtype = at::kHalf;
    o.fp16 = c.fp16;  // the scaler's options (Fp16Config is LossScalerOptions plus switches)
  } else if (c.bf16.enabled) {
    o.compute_dtype = at::kBFloat16;
  }
  o.bf16_check_grad_overflow = c.bf16.check_grad_overflow;
  if (c.bf16.bf16_master_weights_and_grads) {
    o.master_dtype = at::kBFloat16;
    // "and grads": the gradient shard the bf16 master steps with is bf16 too, unless
    // data_types.grad_accum_dtype says otherwise.
    o.grad_accum_dtype = at::kBFloat16;
  }
  if (c.bf16.bf16_optimizer_states) o.optimizer_state_dtype = at::kBFloat16;
  if (c.data_types.grad_accum_dtype) o.grad_accum_dtype = to_scalar(*c.data_types.grad_accum_dtype);
  if (c.optimizer) {
    const OptimizerConfig& oc = *c.optimizer;
    // DeepSpeed's "Adam" decouples weight decay unless adam_w_mode is false (its FusedAdam and
    // CPUAdam default), so it is torch's AdamW then. Which implementation steps it (the fused
    // pass of the master's device) the engine decides (optim::resolve_for_device).
    o.optimizer.type =
        oc.type == OptimizerType::kAdam && oc.adam_w_mode ? OptimizerType::kAdamW : oc.type;
    o.optimizer.adamw_mode = oc.type == OptimizerType::kAdamW || oc.adam_w_mode;
    o.optimizer.block_size = oc.block_size;
    o.hyper.lr = oc.lr;
    o.hyper.beta1 = oc.betas.size() > 0 ? oc.betas[0] : 0.9;
    o.hyper.beta2 = oc.betas.size() > 1 ? oc.betas[1] : 0.999;
    o.hyper.eps = oc.eps;
    o.hyper.weight_decay = oc.weight_decay;
    o.hyper.momentum = oc.momentum;
    o.hyper.dampening = oc.dampening;
    o.hyper.nesterov = oc.nesterov;
    o.optimizer.max_coeff = oc.max_coeff;
    o.optimizer.min_coeff = oc.min_coeff;
    o.optimizer.eps_inside_sqrt = oc.eps_inside_sqrt;
    o.optimizer.bias_correction = oc.bias_correction;
    if (oc.type == OptimizerType::kMuon) muon_options(oc, o);
  }
  o.optimizer.swa = {c.swa.enabled, c.swa.swa_start, c.swa.swa_freq};
  read_environment_switches(o);
  o.param_groups.no_decay_patterns = c.parameter_groups.no_decay;
  o.param_groups.llrd_decay = c.parameter_groups.layer_lr_decay;
  if (c.communication_data_type) o.communication_dtype = to_scalar(*c.communication_data_type);
  o.sequence_parallel_size = c.sequence_parallel_size;
  if (c.sequence_parallel_size > 1) {
    // DeepSpeed's engine replaces communication_data_type by this key under sequence parallelism,
    // fp32 when it is not given.
    o.communication_dtype = sequence_parallel_dtype(c);
  }
  o.tensor_parallel_size = c.tensor_parallel.size();
  o.expert_parallel_size = c.expert_parallel.size();
  o.prescale_gradients = c.prescale_gradients;
  o.gradient_predivide_factor = c.gradient_predivide_factor;
  o.wall_clock_breakdown = c.wall_clock_breakdown;
  o.flops_profiler = {.enabled = c.flops_profiler.enabled,
                      .profile_step = c.flops_profiler.profile_step,
                      .module_depth = static_cast<int>(c.flops_profiler.module_depth),
                      .top_modules = static_cast<int>(c.flops_profiler.top_modules),
                      .detailed = c.flops_profiler.detailed,
                      .output_file = c.flops_profiler.output_file,
                      .peak_tflops = c.flops_profiler.peak_tflops,
                      .micro_batch_size = c.train_micro_batch_size_per_gpu};
  o.activation_checkpointing.number_checkpoints = c.activation_checkpointing.number_checkpoints;
  o.activation_checkpointing.cpu_checkpointing = c.activation_checkpointing.cpu_checkpointing;
  o.steps_per_print = static_cast<int>(c.steps_per_print);
  o.max_inflight_reductions = c.communication.max_inflight_reductions;
  if (c.scheduler) {
    SchedulerConfig s = *c.scheduler;
    // DeepSpeed cycles the momentum only of an optimizer whose defaults have betas
    // (OneCycle._initialize_momentum): not torch's SGD, not MuonWithAuxAdam.
    const bool has_betas =
        o.optimizer.type != OptimizerType::kSgd && o.optimizer.type != OptimizerType::kMuon;
    if (s.type == SchedulerType::kOneCycle && s.cycle_momentum && !has_betas) {
      ZT_LOG_WARN("config: scheduler.params.cycle_momentum has no effect with optimizer ",
                  optim::optimizer_name(o.optimizer.type),
                  ", which has no betas (as in DeepSpeed)");
      s.cycle_momentum = false;
    }
    o.lr_schedule = optim::make_lr_schedule(s, o.hyper.lr);
  }
  o.units = std::move(units);
  return o;
}

at::ScalarType sequence_parallel_dtype(const Config& c) {
  const auto& d = c.seq_parallel_communication_data_type;
  return d ? to_scalar(*d) : at::kFloat;
}

dist::CommOptions comm_options_from_config(const Config& c) {
  dist::CommOptions o;
  o.backend = c.communication.backend;
  o.timeout = std::chrono::seconds(c.communication.timeout);
  o.comms_logger = c.comms_logger;
  return o;
}

}  // namespace zt
