#pragma once
// The one field list of zt::Config. Each visit_* function names every key of one block, in the
// order written by to_json, with its options ("auto" allowed, older names). Three visitors walk
// it: the reader (config_reader.h: YAML tree -> Config, collecting errors), the JSON writer
// (config_json.cpp) and, through the writer, operator==. Adding a field here is all it takes for
// it to be read, checked for unknown-key suggestions, written and compared.
//
// A visitor V provides:
//   v.field(key, T& value, FieldOptions)      bool, int, int64_t, double, std::string,
//                                             std::optional<int64_t>, std::vector<double|string>
//   v.choice(key, E& or std::optional<E>&, names, FieldOptions)   an enum by name
//   v.block(key, fn, FieldOptions)            a nested block; fn(visitor&) visits its keys
//   v.optional_block(key, std::optional<T>&, fn)  a block that may be absent; fn(visitor&, T&)
//   v.unsupported({keys...})                  DeepSpeed keys of this block we warn about
// The writer takes the config by const reference and casts constness away: it only reads.

#include <cstddef>
#include <initializer_list>

#include "core/config/config.h"

namespace zt::config_schema {

struct FieldOptions {
  bool allow_auto = false;      // "auto" accepted, resolved later (config_resolve.cpp)
  const char* alias = nullptr;  // another name the key is also read under
  const char* alias2 = nullptr;
};
inline FieldOptions auto_ok(const char* alias = nullptr) {
  return {true, alias, nullptr};
}
inline FieldOptions also_named(const char* alias, const char* alias2 = nullptr) {
  return {false, alias, alias2};
}

// Names of enum values as written in files, matched case-insensitively. The first name of a
// value is the one written; later ones are accepted spellings.
template <typename E>
struct EnumName {
  E value;
  const char* name;
};

inline constexpr EnumName<OffloadDevice> kOffloadDeviceNames[] = {
    {OffloadDevice::kNone, "none"}, {OffloadDevice::kCpu, "cpu"}, {OffloadDevice::kNvme, "nvme"}};
inline constexpr EnumName<DType> kDTypeNames[] = {
    {DType::kFp32, "fp32"},    {DType::kFp16, "fp16"},    {DType::kBf16, "bf16"},
    {DType::kFp32, "float32"}, {DType::kFp16, "float16"}, {DType::kBf16, "bfloat16"},
    {DType::kBf16, "bfp16"}};
inline constexpr EnumName<OptimizerType> kOptimizerNames[] = {
    {OptimizerType::kAdam, "Adam"},       {OptimizerType::kAdamW, "AdamW"},
    {OptimizerType::kSgd, "SGD"},         {OptimizerType::kAdam8bit, "Adam8bit"},
    {OptimizerType::kCpuAdam, "CPUAdam"}, {OptimizerType::kCpuAdam, "DeepSpeedCPUAdam"}};
inline constexpr EnumName<SchedulerType> kSchedulerNames[] = {
    {SchedulerType::kWarmupLR, "WarmupLR"},
    {SchedulerType::kWarmupDecayLR, "WarmupDecayLR"},
    {SchedulerType::kWarmupCosineLR, "WarmupCosineLR"},
    {SchedulerType::kOneCycle, "OneCycle"}};
inline constexpr EnumName<WarmupType> kWarmupTypeNames[] = {{WarmupType::kLog, "log"},
                                                            {WarmupType::kLinear, "linear"}};
inline constexpr EnumName<CommBackend> kCommBackendNames[] = {{CommBackend::kAuto, "auto"},
                                                              {CommBackend::kMpi, "mpi"},
                                                              {CommBackend::kGloo, "gloo"},
                                                              {CommBackend::kNccl, "nccl"}};
inline constexpr EnumName<TagValidation> kTagValidationNames[] = {
    {TagValidation::kIgnore, "Ignore"},
    {TagValidation::kWarn, "Warn"},
    {TagValidation::kFail, "Fail"}};

template <typename E, std::size_t N>
const char* name_of(E value, const EnumName<E> (&names)[N]) {
  for (const auto& n : names) {
    if (n.value == value) return n.name;
  }
  return "?";
}

template <typename V>
void visit_offload(V& v, OffloadConfig& c, bool for_params) {
  v.choice("device", c.device, kOffloadDeviceNames, {});
  v.field("nvme_path", c.nvme_path, {});
  v.field("pin_memory", c.pin_memory, {});
  v.field("buffer_count", c.buffer_count, {});
  if (for_params) {
    v.field("buffer_size", c.buffer_size, {});
    v.field("max_in_cpu", c.max_in_cpu, {});
  } else {
    v.field("ratio", c.ratio, {});
    v.unsupported({"pipeline_read", "pipeline_write", "fast_init", "pipeline"});
  }
}

template <typename V>
void visit_zero(V& v, ZeroConfig& c) {
  v.field("stage", c.stage, {});
  v.field("overlap_comm", c.overlap_comm, {});
  v.field("contiguous_gradients", c.contiguous_gradients, {});
  v.field("reduce_bucket_size", c.reduce_bucket_size, auto_ok());
  v.field("allgather_bucket_size", c.allgather_bucket_size, {});
  v.field("reduce_scatter", c.reduce_scatter, {});
  v.field("allgather_partitions", c.allgather_partitions, {});
  // The stage3_ names also under the short names DeepSpeed's pydantic model accepts.
  v.field("stage3_prefetch_bucket_size", c.stage3_prefetch_bucket_size,
          auto_ok("prefetch_bucket_size"));
  v.field("stage3_param_persistence_threshold", c.stage3_param_persistence_threshold,
          auto_ok("param_persistence_threshold"));
  v.field("stage3_max_live_parameters", c.stage3_max_live_parameters,
          auto_ok("max_live_parameters"));
  v.field("stage3_max_reuse_distance", c.stage3_max_reuse_distance, auto_ok("max_reuse_distance"));
  v.field("stage3_gather_16bit_weights_on_model_save", c.stage3_gather_16bit_weights_on_model_save,
          FieldOptions{true, "stage3_gather_fp16_weights_on_model_save",
                       "gather_16bit_weights_on_model_save"});
  v.field("sub_group_size", c.sub_group_size, {});
  v.block("offload_optimizer", [&](auto& w) { visit_offload(w, c.offload_optimizer, false); }, {});
  v.block("offload_param", [&](auto& w) { visit_offload(w, c.offload_param, true); }, {});
  v.unsupported({"round_robin_gradients",
                 "elastic_checkpoint",
                 "ignore_unused_parameters",
                 "legacy_stage1",
                 "load_from_fp32_weights",
                 "cpu_offload",
                 "cpu_offload_params",
                 "cpu_offload_use_pin_memory",
                 "stage3_model_persistence_threshold",
                 "model_persistence_threshold",
                 "zero_hpz_partition_size",
                 "zero_quantized_weights",
                 "zero_quantized_nontrainable_weights",
                 "zero_quantized_gradients",
                 "mics_shard_size",
                 "mics_hierarchical_params_gather",
                 "memory_efficient_linear",
                 "pipeline_loading_checkpoint",
                 "override_module_apply",
                 "use_all_reduce_for_fetch_params",
                 "log_trace_cache_warnings",
                 "stage3_module_granularity_threshold",
                 "use_multi_rank_bucket_allreduce"});
}

template <typename V>
void visit_fp16(V& v, Fp16Config& c) {
  v.field("enabled", c.enabled, auto_ok());
  v.field("auto_cast", c.auto_cast, {});
  v.field("loss_scale", c.loss_scale, {});
  v.field("initial_scale_power", c.initial_scale_power, {});
  v.field("loss_scale_window", c.loss_scale_window, {});
  v.field("hysteresis", c.hysteresis, {});
  v.field("consecutive_hysteresis", c.consecutive_hysteresis, {});
  v.field("min_loss_scale", c.min_loss_scale, {});
  v.unsupported({"fp16_master_weights_and_grads"});
}

template <typename V>
void visit_optimizer(V& v, OptimizerConfig& c) {
  v.choice("type", c.type, kOptimizerNames, {});
  v.block("params",
          [&](auto& w) {
            w.field("lr", c.lr, auto_ok());
            if (c.type == OptimizerType::kSgd) {
              w.field("momentum", c.momentum, {});
              w.field("dampening", c.dampening, {});
              w.field("weight_decay", c.weight_decay, auto_ok());
              w.field("nesterov", c.nesterov, {});
              return;
            }
            w.field("betas", c.betas, auto_ok());
            w.field("eps", c.eps, auto_ok());
            w.field("weight_decay", c.weight_decay, auto_ok());
            w.field("bias_correction", c.bias_correction, {});
            if (c.type != OptimizerType::kAdam8bit) w.field("amsgrad", c.amsgrad, {});
            if (c.type == OptimizerType::kAdam || c.type == OptimizerType::kCpuAdam) {
              w.field("adam_w_mode", c.adam_w_mode, {});
            }
            if (c.type == OptimizerType::kAdam8bit) w.field("block_size", c.block_size, {});
            w.unsupported({"torch_adam", "fp32_optimizer_states"});
          },
          {});
}

template <typename V>
void visit_scheduler(V& v, SchedulerConfig& c) {
  v.choice("type", c.type, kSchedulerNames, {});
  v.block("params",
          [&](auto& w) {
            switch (c.type) {
              case SchedulerType::kWarmupLR:
              case SchedulerType::kWarmupDecayLR:
                w.field("warmup_min_lr", c.warmup_min_lr, auto_ok());
                w.field("warmup_max_lr", c.warmup_max_lr, auto_ok());
                w.field("warmup_num_steps", c.warmup_num_steps, auto_ok());
                w.choice("warmup_type", c.warmup_type, kWarmupTypeNames, {});
                if (c.type == SchedulerType::kWarmupDecayLR) {
                  w.field("total_num_steps", c.total_num_steps, auto_ok());
                }
                break;
              case SchedulerType::kWarmupCosineLR:
                w.field("total_num_steps", c.total_num_steps, auto_ok());
                w.field("warmup_min_ratio", c.warmup_min_ratio, {});
                w.field("warmup_num_steps", c.warmup_num_steps, auto_ok());
                w.field("cos_min_ratio", c.cos_min_ratio, {});
                w.choice("warmup_type", c.warmup_type, kWarmupTypeNames, {});
                break;
              case SchedulerType::kOneCycle:
                w.field("cycle_min_lr", c.cycle_min_lr, {});
                w.field("cycle_max_lr", c.cycle_max_lr, auto_ok());
                w.field("decay_lr_rate", c.decay_lr_rate, {});
                w.field("cycle_first_step_size", c.cycle_first_step_size, {});
                w.field("cycle_second_step_size", c.cycle_second_step_size, {});
                w.field("cycle_first_stair_count", c.cycle_first_stair_count, {});
                w.field("cycle_second_stair_count", c.cycle_second_stair_count, {});
                w.field("decay_step_size", c.decay_step_size, {});
                w.field("cycle_momentum", c.cycle_momentum, {});
                w.field("cycle_min_mom", c.cycle_min_mom, {});
                w.field("cycle_max_mom", c.cycle_max_mom, {});
                w.field("decay_mom_rate", c.decay_mom_rate, {});
                break;
            }
            w.unsupported({"last_batch_iteration"});
          },
          {});
}

template <typename V>
void visit_activation_checkpointing(V& v, ActivationCheckpointingConfig& c) {
  v.field("partition_activations", c.partition_activations, {});
  v.field("contiguous_memory_optimization", c.contiguous_memory_optimization, {});
  v.field("cpu_checkpointing", c.cpu_checkpointing, {});
  v.field("number_checkpoints", c.number_checkpoints, {});
  v.field("synchronize_checkpoint_boundary", c.synchronize_checkpoint_boundary, {});
  v.field("profile", c.profile, {});
}

template <typename V>
void visit_checkpoint(V& v, CheckpointConfig& c) {
  v.choice("tag_validation", c.tag_validation, kTagValidationNames, {});
  v.field("save_dir", c.save_dir, {});
  v.field("tag_prefix", c.tag_prefix, {});
  v.field("save_interval", c.save_interval, {});
  v.field("keep_last", c.keep_last, {});
  v.unsupported({"load_universal", "use_node_local_storage", "parallel_write"});
}

template <typename V>
void visit_data(V& v, DataConfig& c) {
  v.field("path", c.path, {});
  v.field("max_length", c.max_length, {});
  v.field("max_tokens", c.max_tokens, {});
  v.field("bucketing", c.bucketing, {});
  v.field("pad_to_multiple", c.pad_to_multiple, {});
  v.field("shuffle", c.shuffle, {});
  v.field("seed", c.seed, {});
  v.field("mega_batch_mult", c.mega_batch_mult, {});
  v.field("drop_last", c.drop_last, {});
}

template <typename V>
void visit_config(V& v, Config& c) {
  v.field("train_batch_size", c.train_batch_size, auto_ok());
  v.field("train_micro_batch_size_per_gpu", c.train_micro_batch_size_per_gpu, auto_ok());
  v.field("gradient_accumulation_steps", c.gradient_accumulation_steps, auto_ok());
  v.field("gradient_clipping", c.gradient_clipping, auto_ok());
  v.field("steps_per_print", c.steps_per_print, {});
  v.field("wall_clock_breakdown", c.wall_clock_breakdown, {});
  v.field("seed", c.seed, {});
  v.block("zero_optimization", [&](auto& w) { visit_zero(w, c.zero_optimization); }, {});
  v.block("fp16", [&](auto& w) { visit_fp16(w, c.fp16); }, {});
  v.block(
      "bf16",
      [&](auto& w) {
        w.field("enabled", c.bf16.enabled, auto_ok());
        w.unsupported({"immediate_grad_update", "check_grad_overflow",
                       "bf16_master_weights_and_grads", "bf16_optimizer_states"});
      },
      also_named("bfloat16"));
  v.block("data_types",
          [&](auto& w) {
            w.choice("grad_accum_dtype", c.data_types.grad_accum_dtype, kDTypeNames, {});
          },
          {});
  v.choice("communication_data_type", c.communication_data_type, kDTypeNames, {});
  v.optional_block("optimizer", c.optimizer,
                   [](auto& w, OptimizerConfig& o) { visit_optimizer(w, o); });
  v.optional_block("scheduler", c.scheduler,
                   [](auto& w, SchedulerConfig& s) { visit_scheduler(w, s); });
  v.block("activation_checkpointing",
          [&](auto& w) { visit_activation_checkpointing(w, c.activation_checkpointing); }, {});
  v.block("checkpoint", [&](auto& w) { visit_checkpoint(w, c.checkpoint); }, {});
  v.block(
      "communication",
      [&](auto& w) {
        w.choice("backend", c.communication.backend, kCommBackendNames, {});
        w.field("timeout", c.communication.timeout, {});
      },
      also_named("comms"));
  v.block("data", [&](auto& w) { visit_data(w, c.data); }, {});
  v.field("freeze", c.freeze, {});
  v.block("parameter_groups",
          [&](auto& w) {
            w.field("no_decay", c.parameter_groups.no_decay, {});
            w.field("layer_lr_decay", c.parameter_groups.layer_lr_decay, {});
          },
          {});
  v.unsupported({"tensorboard",
                 "wandb",
                 "csv_monitor",
                 "comet",
                 "comms_logger",
                 "flops_profiler",
                 "pipeline",
                 "amp",
                 "compression_training",
                 "elasticity",
                 "zero_allow_untested_optimizer",
                 "zero_force_ds_cpu_optimizer",
                 "autotuning",
                 "aio",
                 "sparse_attention",
                 "curriculum_learning",
                 "data_efficiency",
                 "prescale_gradients",
                 "gradient_predivide_factor",
                 "sparse_gradients",
                 "dump_state",
                 "memory_breakdown",
                 "eigenvalue",
                 "progressive_layer_drop",
                 "quantize_training",
                 "nebula",
                 "hybrid_engine",
                 "dataloader_drop_last",
                 "disable_allgather",
                 "timers",
                 "weight_quantization",
                 "compile",
                 "torch_autocast",
                 "graph_harvesting",
                 "load_universal_checkpoint",
                 "seq_parallel_communication_data_type"});
}

}  // namespace zt::config_schema
