// Validation of a read and resolved Config: ranges and rules across keys. A key whose value was
// already rejected while reading is not checked again, so each mistake is reported once.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

#include "base/error.h"
#include "core/config/passes.h"

namespace zt::config_detail {
namespace {

// DeepSpeed upper-cases the writer's enum values before checking them.
std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
  return s;
}

class Validator {
 public:
  Validator(const Config& c, ReadState& st) : c_(c), st_(st) {}

  void run() {
    top();
    zero();
    precision();
    if (c_.optimizer) optimizer(*c_.optimizer);
    if (c_.scheduler) scheduler(*c_.scheduler);
    rest();
  }

 private:
  template <typename... Args>
  void check(const std::string& path, bool ok, const Args&... why) {
    if (!ok && !st_.failed.count(path)) st_.errors.push_back(detail::str(path, ": ", why...));
  }
  template <typename T>
  void at_least(const std::string& path, T value, T min) {
    check(path, value >= min, "must be >= ", min, ", got ", value);
  }
  void fraction(const std::string& path, double value) {
    check(path, value >= 0.0 && value <= 1.0, "must be in [0, 1], got ", value);
  }

  void top() {
    check("gradient_clipping", c_.gradient_clipping >= 0, "must be >= 0 (0 = off), got ",
          c_.gradient_clipping);
    at_least<int64_t>("steps_per_print", c_.steps_per_print, 1);
    at_least<int64_t>("seed", c_.seed, 0);
    at_least<int>("sequence_parallel_size", c_.sequence_parallel_size, 1);
    if (c_.sequence_parallel_size > 1 && c_.world_size >= 1) {
      check("sequence_parallel_size", c_.world_size % c_.sequence_parallel_size == 0,
            "must divide the number of ranks (", c_.world_size, "), got ",
            c_.sequence_parallel_size);
    }
    const Config::TensorParallel& tp = c_.tensor_parallel;
    at_least<int>("tensor_parallel.autotp_size", tp.autotp_size, 0);
    check("tensor_parallel.tp.tp_size", tp.tp_size == 1 || tp.tp_size == tp.autotp_size,
          "must be 1 or tensor_parallel.autotp_size (", tp.autotp_size, "), got ", tp.tp_size);
    check("tensor_parallel.partition_config",
          tp.partition_config.empty() || tp.partition_config.text.front() == '{',
          "must be a block (DeepSpeed's AutoTPConfig: layer_specs, use_default_specs, ...), got ",
          tp.partition_config.text);
    check("tensor_parallel.preset_model",
          tp.preset_model.empty() || tp.preset_model == "llama" || tp.preset_model == "qwen2", "'",
          tp.preset_model,
          "' is not a split the models here make: \"llama\" or \"qwen2\" (the LLaMA family)");
    if (tp.size() > 1 && c_.world_size >= 1) {
      const int64_t split =
          static_cast<int64_t>(std::max(c_.sequence_parallel_size, 1)) * tp.size();
      check("tensor_parallel.autotp_size", c_.world_size % split == 0,
            "must divide the number of ranks (", c_.world_size, ") with sequence_parallel_size (",
            c_.sequence_parallel_size, "), got ", tp.autotp_size);
    }
    const Config::ExpertParallel& ep = c_.expert_parallel;
    at_least<int>("expert_parallel.autoep_size", ep.autoep_size, 1);
    if (ep.size() > 1 && c_.world_size >= 1) {
      check("expert_parallel.autoep_size", c_.world_size % ep.size() == 0,
            "must divide the number of ranks (", c_.world_size, "), got ", ep.autoep_size);
    }
    check("gradient_predivide_factor", c_.gradient_predivide_factor > 0, "must be > 0, got ",
          c_.gradient_predivide_factor);
    const FlopsProfilerConfig& f = c_.flops_profiler;
    at_least<int64_t>("flops_profiler.module_depth", f.module_depth, -1);
    at_least<int64_t>("flops_profiler.top_modules", f.top_modules, 1);
    at_least<double>("flops_profiler.peak_tflops", f.peak_tflops, 0.0);
    at_least<double>("flops_profiler.recompute_fwd_factor", f.recompute_fwd_factor, 0.0);
  }

  void offload(const std::string& path, const OffloadConfig& o, int min_stage, bool params) {
    const int stage = c_.zero_optimization.stage;
    // A rejected stage reads as the default 0; comparing against it would only mislead.
    const bool stage_known = !st_.failed.count("zero_optimization.stage");
    if (o.device != OffloadDevice::kNone && stage_known && stage < min_stage) {
      // DeepSpeed accepts the block and never reads it below that stage; so do we.
      st_.warnings.push_back(detail::str(path, ".device: ", to_string(o.device),
                                         " offload is ignored at zero_optimization.stage ", stage,
                                         " (as in DeepSpeed, it needs stage >= ", min_stage, ")"));
      return;
    }
    check(path + ".nvme_path", o.device != OffloadDevice::kNvme || !o.nvme_path.empty(),
          "required when device is nvme");
    at_least<int64_t>(path + ".buffer_count", o.buffer_count, 0);
    if (params) {
      at_least<int64_t>(path + ".buffer_size", o.buffer_size, 0);
      at_least<int64_t>(path + ".max_in_cpu", o.max_in_cpu, 0);
      if (o.device == OffloadDevice::kNvme) {
        at_least<int64_t>(path + ".buffer_count", o.buffer_count, 1);
        at_least<int64_t>(path + ".buffer_size", o.buffer_size, 1);
      }
    } else {
      check(path + ".ratio", o.ratio >= 0.0 && o.ratio <= 1.0, "must be in [0, 1], got ", o.ratio);
      // DeepSpeed: partial offload only at stage 3; zerotorch has none.
      check(path + ".ratio", o.device == OffloadDevice::kNone || o.ratio == 1.0,
            "partial optimizer offload (ratio < 1) is not implemented; use 1");
      if (o.device == OffloadDevice::kNvme) {
        at_least<int64_t>(path + ".buffer_count", o.buffer_count, 1);
        check("zero_optimization.sub_group_size", c_.zero_optimization.sub_group_size >= 1,
              "must be >= 1 with offload_optimizer.device nvme (elements per NVMe chunk), got ",
              c_.zero_optimization.sub_group_size);
        // The chunks are stepped by CPUAdam (core/zero/nvme_optimizer.h), whose update is
        // elementwise; other optimizers would need their state laid out per chunk.
        const bool adam = !c_.optimizer || c_.optimizer->type == OptimizerType::kAdam ||
                          c_.optimizer->type == OptimizerType::kAdamW ||
                          c_.optimizer->type == OptimizerType::kCpuAdam;
        check(path + ".device", adam, "nvme steps the optimizer with CPUAdam; optimizer.type ",
              c_.optimizer ? to_string(c_.optimizer->type) : "",
              " is not supported there "
              "(use Adam, AdamW or CPUAdam, or device cpu)");
      }
    }
  }

  void zero() {
    const ZeroConfig& z = c_.zero_optimization;
    const std::string p = "zero_optimization.";
    check(p + "stage", z.stage >= 0 && z.stage <= 3, "must be 0..3, got ", z.stage);
    at_least<int64_t>(p + "reduce_bucket_size", z.reduce_bucket_size, 1);
    at_least<int64_t>(p + "allgather_bucket_size", z.allgather_bucket_size, 0);
    at_least<int64_t>(p + "stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size, 0);
    at_least<int64_t>(p + "stage3_param_persistence_threshold",
                      z.stage3_param_persistence_threshold, 0);
    at_least<int64_t>(p + "stage3_module_granularity_threshold",
                      z.stage3_module_granularity_threshold, 0);
    at_least<int64_t>(p + "stage3_max_live_parameters", z.stage3_max_live_parameters, 0);
    at_least<int64_t>(p + "stage3_max_reuse_distance", z.stage3_max_reuse_distance, 0);
    at_least<int64_t>(p + "sub_group_size", z.sub_group_size, 0);
    at_least<int>(p + "mics_shard_size", z.mics_shard_size, -1);
    at_least<int>(p + "zero_hpz_partition_size", z.zero_hpz_partition_size, 1);
    if (z.stage == 3 && z.zero_hpz_partition_size > 1) {
      const int group = z.mics_shard_size > 0 ? z.mics_shard_size : c_.world_size;
      check(p + "zero_hpz_partition_size", group % z.zero_hpz_partition_size == 0,
            "must divide the ranks the state is sharded over (", group, "), got ",
            z.zero_hpz_partition_size);
    }
    if (z.stage == 3 && z.mics_shard_size > 0 && c_.world_size >= 1) {
      check(p + "mics_shard_size",
            z.mics_shard_size <= c_.world_size && c_.world_size % z.mics_shard_size == 0,
            "must divide the number of ranks (", c_.world_size, "), got ", z.mics_shard_size);
    }
    // ZeRO-Offload moves optimizer states, which exist sharded from stage 1; parameters are
    // sharded (and so offloadable) only at stage 3.
    offload(p + "offload_optimizer", z.offload_optimizer, 1, false);
    // The aio block (core/aio/aio_handle.h takes these ranges).
    check("aio.block_size", c_.aio.block_size >= 1 && c_.aio.block_size <= (int64_t{1} << 30),
          "must be 1..1073741824 bytes, got ", c_.aio.block_size);
    check("aio.queue_depth", c_.aio.queue_depth >= 1 && c_.aio.queue_depth <= 4096,
          "must be 1..4096, got ", c_.aio.queue_depth);
    check("aio.thread_count", c_.aio.thread_count >= 1 && c_.aio.thread_count <= 64,
          "must be 1..64, got ", c_.aio.thread_count);
    offload(p + "offload_param", z.offload_param, 3, true);
  }

  void precision() {
    const Fp16Config& f = c_.fp16;
    check("fp16.enabled", !(f.enabled && c_.bf16.enabled), "fp16 and bf16 cannot both be enabled");
    // DeepSpeed's rules (runtime/config.py): bf16 masters exist only where ZeRO shards the
    // optimizer (stages 1-3), and bf16 optimizer states only beside bf16 masters.
    const Bf16Config& b = c_.bf16;
    if (b.bf16_master_weights_and_grads) {
      check("bf16.bf16_master_weights_and_grads", b.enabled, "needs bf16.enabled: true");
      check("bf16.bf16_master_weights_and_grads", c_.zero_optimization.stage >= 1,
            "needs zero_optimization.stage 1, 2 or 3 (as DeepSpeed), got stage ",
            c_.zero_optimization.stage);
    }
    check("bf16.bf16_optimizer_states", !b.bf16_optimizer_states || b.bf16_master_weights_and_grads,
          "needs bf16.bf16_master_weights_and_grads: true (as DeepSpeed)");
    check("fp16.loss_scale", f.loss_scale >= 0, "must be >= 0 (0 = dynamic), got ", f.loss_scale);
    // 2^63 is already far past any useful scale; larger powers overflow fp32 arithmetic.
    check("fp16.initial_scale_power", f.initial_scale_power >= 0 && f.initial_scale_power <= 63,
          "must be 0..63, got ", f.initial_scale_power);
    at_least<int64_t>("fp16.loss_scale_window", f.loss_scale_window, 1);
    at_least<int>("fp16.hysteresis", f.hysteresis, 1);
    check("fp16.min_loss_scale", f.min_loss_scale > 0, "must be > 0, got ", f.min_loss_scale);
    // An int in DeepSpeed's FP16 model (pydantic rejects 0.5 or 1e-10 there).
    check("fp16.min_loss_scale", std::floor(f.min_loss_scale) == f.min_loss_scale,
          "must be an integer, as in DeepSpeed, got ", f.min_loss_scale);
  }

  void optimizer(const OptimizerConfig& o) {
    const std::string p = "optimizer.params.";
    check(p + "lr", o.lr >= 0, "must be >= 0, got ", o.lr);
    check(p + "weight_decay", o.weight_decay >= 0, "must be >= 0, got ", o.weight_decay);
    if (o.type == OptimizerType::kSgd) {
      check(p + "momentum", o.momentum >= 0, "must be >= 0, got ", o.momentum);
      check(p + "dampening", o.dampening >= 0, "must be >= 0, got ", o.dampening);
      check(p + "nesterov", !o.nesterov || (o.momentum > 0 && o.dampening == 0),
            "needs momentum > 0 and dampening 0");
      return;
    }
    if (o.type == OptimizerType::kMuon) {
      muon(o);
      return;
    }
    if (o.betas.size() != 2) {
      check(p + "betas", false, "expected 2 numbers [beta1, beta2], got ", o.betas.size());
    } else {
      for (double b : o.betas) {
        check(p + "betas", b >= 0 && b < 1, "each beta must be in [0, 1), got ", b);
      }
    }
    if (o.type == OptimizerType::kLion) return;
    check(p + "eps", o.eps > 0, "must be > 0, got ", o.eps);
    if (o.type == OptimizerType::kAdam8bit) at_least<int64_t>(p + "block_size", o.block_size, 1);
    if (o.type == OptimizerType::kLamb) {
      check(p + "min_coeff", o.min_coeff >= 0, "must be >= 0, got ", o.min_coeff);
      check(p + "max_coeff", o.max_coeff >= o.min_coeff, "must be >= min_coeff (", o.min_coeff,
            "), got ", o.max_coeff);
      return;
    }
    // Read because DeepSpeed's Adam takes them; the steps here always correct bias and have no
    // AMSGrad, so a file asking otherwise would train differently.
    check(p + "bias_correction", o.bias_correction,
          "false is not implemented (zerotorch's Adam always corrects bias)");
    check(p + "amsgrad", !o.amsgrad, "AMSGrad is not implemented");
  }

  void muon(const OptimizerConfig& o) {
    const std::string p = "optimizer.params.";
    const MuonConfig& m = o.muon;
    check(p + "momentum", m.momentum >= 0 && m.momentum < 1, "must be in [0, 1), got ", m.momentum);
    check(p + "ns_method", m.ns_method == "gram" || m.ns_method == "standard",
          "must be \"gram\" or \"standard\", got \"", m.ns_method, "\"");
    check(p + "betas", m.betas.size() == 2, "expected 2 numbers [beta1, beta2], got ",
          m.betas.size());
    for (double b : m.betas) {
      check(p + "betas", b >= 0 && b < 1, "each beta must be in [0, 1), got ", b);
    }
    check(p + "eps", m.eps > 0, "must be > 0, got ", m.eps);
    // Each half's lr is the scheduled lr times muon_lr / lr (adam_lr / lr), so lr must not be 0.
    for (const auto& [key, v] : {std::pair<const char*, double>{"muon_lr", m.muon_lr},
                                 std::pair<const char*, double>{"adam_lr", m.adam_lr}}) {
      if (v == -1) continue;
      check(p + key, v >= 0, "must be >= 0, got ", v);
      check(p + key, o.lr > 0, "needs optimizer.params.lr > 0 (it scales the scheduled lr by ", key,
            " / lr)");
    }
  }

  void required(const std::string& path, const char* type) {
    check(path, st_.present.count(path) > 0, "required by ", type);
  }

  void scheduler(const SchedulerConfig& s) {
    const std::string p = "scheduler.params.";
    const char* type = to_string(s.type);
    switch (s.type) {
      case SchedulerType::kWarmupDecayLR:
      case SchedulerType::kWarmupLR:
        check(p + "warmup_min_lr", s.warmup_min_lr >= 0, "must be >= 0, got ", s.warmup_min_lr);
        check(p + "warmup_max_lr", s.warmup_max_lr >= s.warmup_min_lr, "must be >= warmup_min_lr (",
              s.warmup_min_lr, "), got ", s.warmup_max_lr);
        at_least<int64_t>(p + "warmup_num_steps", s.warmup_num_steps, 0);
        if (s.type == SchedulerType::kWarmupDecayLR) total_steps(s, type);
        break;
      case SchedulerType::kWarmupCosineLR:
        at_least<int64_t>(p + "warmup_num_steps", s.warmup_num_steps, 0);
        fraction(p + "warmup_min_ratio", s.warmup_min_ratio);
        fraction(p + "cos_min_ratio", s.cos_min_ratio);
        total_steps(s, type);
        break;
      case SchedulerType::kOneCycle:
        required(p + "cycle_min_lr", type);
        required(p + "cycle_max_lr", type);
        check(p + "cycle_max_lr", s.cycle_max_lr >= s.cycle_min_lr, "must be >= cycle_min_lr (",
              s.cycle_min_lr, "), got ", s.cycle_max_lr);
        at_least<int64_t>(p + "cycle_first_step_size", s.cycle_first_step_size, 1);
        if (s.cycle_second_step_size) {
          at_least<int64_t>(p + "cycle_second_step_size", *s.cycle_second_step_size, 1);
        }
        check(p + "cycle_max_mom", s.cycle_max_mom >= s.cycle_min_mom, "must be >= cycle_min_mom (",
              s.cycle_min_mom, "), got ", s.cycle_max_mom);
        break;
    }
  }

  void total_steps(const SchedulerConfig& s, const char* type) {
    const std::string path = "scheduler.params.total_num_steps";
    required(path, type);
    if (st_.present.count(path)) {
      check(path, s.total_num_steps >= 1 && s.total_num_steps >= s.warmup_num_steps,
            "must be >= 1 and >= warmup_num_steps (", s.warmup_num_steps, "), got ",
            s.total_num_steps);
    }
  }

  void rest() {
    if (c_.activation_checkpointing.number_checkpoints) {
      at_least<int64_t>("activation_checkpointing.number_checkpoints",
                        *c_.activation_checkpointing.number_checkpoints, 1);
    }
    at_least<int64_t>("checkpoint.save_interval", c_.checkpoint.save_interval, 0);
    at_least<int64_t>("checkpoint.keep_last", c_.checkpoint.keep_last, 0);
    check("checkpoint.tag_prefix", !c_.checkpoint.tag_prefix.empty(), "must not be empty");
    // DeepSpeed's own checks of the writer block (runtime/model_checkpointing/config.py: type and
    // data_parallel upper-cased, then one of its values).
    const CheckpointConfig::Writer& w = c_.checkpoint.writer;
    const std::string type = upper(w.type), unit = upper(w.data_parallel);
    check("checkpoint.writer.type", type == "FAST" || type == "PYTHON" || type == "MOCK",
          "must be one of fast, python, mock, got '", w.type, "'");
    check("checkpoint.writer.data_parallel",
          unit.empty() || unit == "REPLICA" || unit == "SOCKET" || unit == "MACHINE",
          "must be one of replica, socket, machine, got '", w.data_parallel, "'");
    at_least<int64_t>("checkpoint.writer.io_buffer_size", w.io_buffer_size, 1);
    at_least<int64_t>("checkpoint.writer.io_multiplier", w.io_multiplier, 1);
    at_least<int64_t>("swa.swa_start", c_.swa.swa_start, 0);
    at_least<int64_t>("swa.swa_freq", c_.swa.swa_freq, 1);
    check("swa.enabled",
          !(c_.swa.enabled && c_.zero_optimization.stage >= 1 &&
            c_.zero_optimization.optimizer_on_nvme()),
          "the average is laid out like the whole fp32 master in memory, which "
          "zero_optimization.offload_optimizer.device nvme streams from files chunk by chunk; use "
          "device cpu, or turn swa off");
    at_least<double>("memory_plan.device_limit_gib", c_.memory_plan.device_limit_gib, 0.0);
    at_least<double>("memory_plan.host_limit_gib", c_.memory_plan.host_limit_gib, 0.0);
    at_least<double>("memory_plan.nvme_limit_gib", c_.memory_plan.nvme_limit_gib, 0.0);
    at_least<int64_t>("communication.timeout", c_.communication.timeout, 1);
    at_least<int64_t>("communication.max_inflight_reductions",
                      c_.communication.max_inflight_reductions, 1);

    const DataConfig& d = c_.data;
    at_least<int64_t>("data.max_length", d.max_length, 1);
    at_least<int64_t>("data.max_tokens", d.max_tokens, 0);
    check("data.max_tokens", d.max_tokens == 0 || d.max_tokens >= d.max_length, "a budget of ",
          d.max_tokens, " tokens cannot hold one sample of data.max_length ", d.max_length);
    at_least<int64_t>("data.pad_to_multiple", d.pad_to_multiple, 1);
    at_least<int64_t>("data.mega_batch_mult", d.mega_batch_mult, 1);
    if (d.seed) at_least<int64_t>("data.seed", *d.seed, 0);

    const double llrd = c_.parameter_groups.layer_lr_decay;
    check("parameter_groups.layer_lr_decay", llrd > 0 && llrd <= 1, "must be in (0, 1], got ",
          llrd);
  }

  const Config& c_;
  ReadState& st_;
};

}  // namespace

void validate_config(const Config& config, ReadState& state) {
  Validator(config, state).run();
}

void warn_inert_keys(const Config& c, ReadState& st) {
  auto warn = [&](const std::string& key, const std::string& why) {
    if (st.present.count(key) && !st.failed.count(key)) {
      st.warnings.push_back(key + ": no effect in zerotorch (" + why + ")");
    }
  };
  const CheckpointConfig::Writer& w = c.checkpoint.writer;
  const CheckpointConfig::Writer dw;
  const std::string wp = "checkpoint.writer.";
  const char* own_writer = "zerotorch writes its shard format with its own streaming writer";
  if (upper(w.type) != "FAST") warn(wp + "type", own_writer);
  if (w.io_buffer_size != dw.io_buffer_size) warn(wp + "io_buffer_size", own_writer);
  if (w.io_buffer_double != dw.io_buffer_double) warn(wp + "io_buffer_double", own_writer);
  if (w.io_multiplier != dw.io_multiplier) warn(wp + "io_multiplier", own_writer);
  if (w.show_statistics) warn(wp + "show_statistics", own_writer);
  if (!w.data_parallel.empty()) {
    warn(wp + "data_parallel", "each rank of the (first) shard group writes its own shard");
  }
  if (c.checkpoint.parallel_write_pipeline_stage) {
    warn("checkpoint.parallel_write.pipeline_stage",
         "no pipeline parallelism; every rank writes its own shard");
  }
  if (c.flops_profiler.recompute_fwd_factor != 0.0) {
    warn("flops_profiler.recompute_fwd_factor",
         "the backward and activation checkpointing's recompute are counted, not estimated");
  }
  if (c.sequence_parallel_size <= 1) {
    warn("seq_parallel_communication_data_type",
         "it sets the gradient reduction's dtype only with sequence_parallel_size > 1");
  }
  const ZeroConfig& z = c.zero_optimization;
  const ZeroConfig d;  // DeepSpeed's defaults
  const std::string p = "zero_optimization.";
  if (!z.overlap_comm) {
    warn(p + "overlap_comm", "gradient reduction always overlaps backward");
  }
  if (!z.contiguous_gradients) {
    warn(p + "contiguous_gradients", "gradients always live in flat buffers");
  }
  if (!z.reduce_scatter) warn(p + "reduce_scatter", "stages 1-3 always reduce-scatter");
  if (z.mics_shard_size > 0 && z.stage != 3) {
    warn(p + "mics_shard_size", "hybrid sharding is a stage-3 mode, as DeepSpeed's MiCS");
  }
  if (z.zero_quantized_gradients && z.stage != 3) {
    warn(p + "zero_quantized_gradients", "qgZ quantizes stage-3 gradient reductions only");
  }
  if (z.zero_quantized_weights && z.stage != 3) {
    warn(p + "zero_quantized_weights", "qwZ quantizes stage-3 parameter gathers only");
  }
  if (z.zero_quantized_nontrainable_weights && z.stage != 3) {
    warn(p + "zero_quantized_nontrainable_weights",
         "frozen parameters are partitioned, and so quantized, at stage 3 only");
  }
  if (z.zero_hpz_partition_size > 1 && z.stage != 3) {
    warn(p + "zero_hpz_partition_size", "hpZ partitions stage-3 parameters only");
  }
  if (z.mics_hierarchical_params_gather && (z.mics_shard_size <= 0 || z.stage != 3)) {
    warn(p + "mics_hierarchical_params_gather",
         "it changes how a stage-3 hybrid shard group (mics_shard_size) gathers");
  }
  if (!z.allgather_partitions) {
    warn(p + "allgather_partitions", "updated shards are always all-gathered");
  }
  if (z.stage >= 1 && z.allgather_bucket_size != d.allgather_bucket_size) {
    warn(p + "allgather_bucket_size",
         "parameters are gathered per flat buffer of reduce_bucket_size elements");
  }
  // DeepSpeed reads these at stage 3 only, so below it they mean nothing there either.
  // DeepSpeed's defaults ask for nothing in particular; another value is a request we ignore.
  if (z.stage == 3) {
    if (z.stage3_max_live_parameters != d.stage3_max_live_parameters) {
      warn(p + "stage3_max_live_parameters",
           "stage 3 gathers one unit ahead, bounded by stage3_prefetch_bucket_size");
    }
    if (z.sub_group_size != d.sub_group_size &&
        z.offload_optimizer.device != OffloadDevice::kNvme) {
      warn(p + "sub_group_size",
           "the optimizer steps each flat shard whole (chunks only with offload_optimizer.device "
           "nvme)");
    }
  }
  if (z.offload_optimizer.device != OffloadDevice::kNvme) {
    if (z.offload_optimizer.pipeline_read) {
      warn(p + "offload_optimizer.pipeline_read", "it acts only with device nvme");
    }
    if (z.offload_optimizer.pipeline_write) {
      warn(p + "offload_optimizer.pipeline_write", "it acts only with device nvme");
    }
  }
  // The aio block drives both NVMe swappers: the optimizer state's and the parameter shards'.
  if (z.offload_optimizer.device != OffloadDevice::kNvme &&
      !(z.stage == 3 && z.offload_param.device == OffloadDevice::kNvme)) {
    for (const char* k : {"block_size", "queue_depth", "thread_count", "single_submit",
                          "overlap_events", "use_io_uring"}) {
      warn(std::string("aio.") + k,
           "it acts only with zero_optimization.offload_optimizer.device nvme or, at stage 3, "
           "offload_param.device nvme");
    }
  }
  if (z.offload_optimizer.device == OffloadDevice::kCpu && !z.offload_optimizer.pin_memory) {
    warn(p + "offload_optimizer.pin_memory", "host buffers are always pinned on CUDA");
  }
  if (c.fp16.enabled && c.fp16.auto_cast) {
    warn("fp16.auto_cast", "the engine casts the model; inputs are the program's");
  }
  // The block configures zt::checkpoint_activations (core/activations/activation_checkpoint.h),
  // which a model calls where it checkpoints (the GPT example with model.activation_checkpointing).
  const ActivationCheckpointingConfig& a = c.activation_checkpointing;
  const std::string ac = "activation_checkpointing.";
  // DeepSpeed partitions a saved input across the model-parallel group (its mpu), whose ranks
  // hold the same activation; zerotorch has no tensor parallelism, so that group is one rank, and
  // DeepSpeed without an mpu keeps whole inputs too. The contiguous buffer holds partitions.
  const std::string no_mp =
      "it acts across a model-parallel group, which zerotorch (no tensor parallelism) does not "
      "have: each rank keeps its own saved inputs whole, as DeepSpeed without an mpu";
  if (a.partition_activations) warn(ac + "partition_activations", no_mp);
  if (a.contiguous_memory_optimization) warn(ac + "contiguous_memory_optimization", no_mp);
  if (a.synchronize_checkpoint_boundary) {
    warn(ac + "synchronize_checkpoint_boundary",
         "checkpoint boundaries are not synchronized (a profiling aid; no effect on results)");
  }
  if (a.profile) warn(ac + "profile", "checkpointed forwards are not timed separately");
  const std::string mp = "elasticity.model_parallel_size";
  if (c.elasticity.enabled && c.elasticity.model_parallel_size > 1 && !st.failed.count(mp)) {
    st.warnings.push_back(mp +
                          ": zerotorch has no model parallelism (every rank is data-parallel); "
                          "the elastic batch is still computed with it, as DeepSpeed's "
                          "compute_elastic_config does, for the world size of all ranks");
  }
}

}  // namespace zt::config_detail
