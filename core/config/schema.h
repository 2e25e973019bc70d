#pragma once
// The one field list of zt::Config. Each visit_* function names every key of one block, in the
// order written by to_json, with its options ("auto" allowed, older names). Three visitors walk
// it: the reader (core/config/reader.h: YAML tree -> Config, collecting errors), the JSON writer
// (core/config/json.cpp) and, through the writer, operator==. Adding a field here is all it takes
// for it to be read, checked for unknown-key suggestions, written and compared.
//
// A visitor V provides:
//   v.field(key, T& value, FieldOptions)      bool, int, int64_t, double, std::string,
//                                             std::optional<int64_t>,
//                                             std::vector<double|int64_t|string>
//   v.choice(key, E& or std::optional<E>&, names, FieldOptions)   an enum by name
//   v.block(key, fn, FieldOptions)            a nested block; fn(visitor&) visits its keys
//   v.optional_block(key, std::optional<T>&, fn)  a block that may be absent; fn(visitor&, T&)
//   v.unsupported({{key, kind, why}, ...})   DeepSpeed keys of this block we do not implement
//   v.unknown_keys_warn()                     keys nobody asked for are warnings, not errors
//                                             (blocks DeepSpeed reads leniently: the top level,
//                                             activation_checkpointing)
// The writer takes the config by const reference and casts constness away: it only reads.

#include <cstddef>
#include <initializer_list>

#include "core/config/config.h"

namespace zt::config_schema {

struct FieldOptions {
  bool allow_auto = false;      // "auto" accepted, resolved later (resolve.cpp)
  const char* alias = nullptr;  // another name the key is also read under
  const char* alias2 = nullptr;
};
inline FieldOptions auto_ok(const char* alias = nullptr) {
  return {true, alias, nullptr};
}
inline FieldOptions also_named(const char* alias, const char* alias2 = nullptr) {
  return {false, alias, alias2};
}

// A DeepSpeed key zerotorch reads but does not act on. It is silent when its value says "off"
// (null, false, an empty block or one with `enabled: false`, or the value `same`, which is what
// zerotorch does anyway); otherwise:
//   kFeature   a DeepSpeed feature zerotorch lacks: one warning naming the key, then ignored;
//   kNoEffect  a tuning knob with no counterpart here (results are the same): one warning;
//   kRefused   it would change memory use or numerics, so ignoring it would train something
//              other than what the file says: an error.
enum class Unsupported { kFeature, kNoEffect, kRefused };
struct UnsupportedKey {
  const char* key;
  Unsupported kind;
  const char* why;  // the end of the message: what zerotorch does instead
  // The one scalar value that means what zerotorch does; unset: false, null, an empty block and
  // a block with `enabled: false` do.
  const char* same = nullptr;
};

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
    {DType::kFp32, "float32"}, {DType::kFp16, "float16"}, {DType::kBf16, "bfloat16"}};
// communication_data_type: exactly the names DeepSpeed's get_communication_data_type takes.
inline constexpr EnumName<DType> kCommDTypeNames[] = {
    {DType::kFp32, "fp32"}, {DType::kFp16, "fp16"}, {DType::kBf16, "bf16"}};
inline constexpr EnumName<OptimizerType> kOptimizerNames[] = {
    {OptimizerType::kAdam, "Adam"},       {OptimizerType::kAdamW, "AdamW"},
    {OptimizerType::kSgd, "SGD"},         {OptimizerType::kAdam8bit, "Adam8bit"},
    {OptimizerType::kCpuAdam, "CPUAdam"}, {OptimizerType::kLamb, "Lamb"},
    {OptimizerType::kLion, "Lion"},       {OptimizerType::kCpuAdam, "DeepSpeedCPUAdam"},
    {OptimizerType::kLamb, "FusedLamb"},  {OptimizerType::kMuon, "Muon"}};

// DeepSpeed optimizer types zerotorch refuses, with the reason (matched case-insensitively).
struct RefusedName {
  const char* name;
  const char* why;
};
inline constexpr RefusedName kRefusedOptimizers[] = {
    {"OneBitAdam", "1-bit Adam compresses the momentum exchange to 1 bit with error feedback"},
    {"OneBitLamb", "1-bit LAMB compresses the momentum exchange to 1 bit with error feedback"},
    {"ZeroOneAdam", "0/1 Adam skips and 1-bit-compresses variance and momentum exchanges"},
    {"Adagrad", "no Adagrad on flat shards"},
    {"MuAdam", "no muP optimizers"},
    {"MuAdamW", "no muP optimizers"},
    {"MuSGD", "no muP optimizers"}};
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
inline constexpr EnumName<LoadFallback> kLoadFallbackNames[] = {
    {LoadFallback::kNone, "none"}, {LoadFallback::kPrevious, "previous"}};

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
    v.field("pipeline_read", c.pipeline_read, {});
    v.field("pipeline_write", c.pipeline_write, {});
    v.unsupported({{"fast_init", Unsupported::kNoEffect,
                    "NVMe swap files are written from the masters when the engine starts"},
                   {"super_offload", Unsupported::kFeature, "no Superchip offload path"},
                   {"convert_grad_on_cpu", Unsupported::kNoEffect,
                    "gradients are copied to the host in fp32", "true"},
                   {"cpuadam_cores_perc", Unsupported::kNoEffect,
                    "CpuAdam uses LibTorch's intra-op threads"}});
  }
}

// DeepSpeed reads its aio block as a plain dict (get_aio_config): unknown keys are warnings.
template <typename V>
void visit_aio(V& v, aio::AioOptions& c) {
  v.field("block_size", c.block_size, {});
  v.field("queue_depth", c.queue_depth, {});
  v.field("thread_count", c.thread_count, also_named("intra_op_parallelism"));
  v.field("single_submit", c.single_submit, {});
  v.field("overlap_events", c.overlap_events, {});
  v.field("use_io_uring", c.use_io_uring, {});  // zerotorch's own (core/aio/aio_options.h)
  v.unknown_keys_warn();
  v.unsupported({{"use_gds", Unsupported::kFeature,
                  "no GPUDirect Storage: NVMe reads and writes go through host buffers"}});
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
  v.field("stage3_module_granularity_threshold", c.stage3_module_granularity_threshold,
          also_named("module_granularity_threshold"));
  v.field("stage3_max_live_parameters", c.stage3_max_live_parameters,
          auto_ok("max_live_parameters"));
  v.field("stage3_max_reuse_distance", c.stage3_max_reuse_distance, auto_ok("max_reuse_distance"));
  v.field("stage3_gather_16bit_weights_on_model_save", c.stage3_gather_16bit_weights_on_model_save,
          FieldOptions{true, "stage3_gather_fp16_weights_on_model_save",
                       "gather_16bit_weights_on_model_save"});
  v.field("sub_group_size", c.sub_group_size, {});
  v.field("mics_shard_size", c.mics_shard_size, {});
  v.field("mics_hierarchical_params_gather", c.mics_hierarchical_params_gather, {});
  v.field("zero_hpz_partition_size", c.zero_hpz_partition_size, {});
  v.field("zero_quantized_weights", c.zero_quantized_weights, {});
  v.field("zero_quantized_gradients", c.zero_quantized_gradients, {});
  v.field("zero_quantized_nontrainable_weights", c.zero_quantized_nontrainable_weights, {});
  v.block("offload_optimizer", [&](auto& w) { visit_offload(w, c.offload_optimizer, false); }, {});
  v.block("offload_param", [&](auto& w) { visit_offload(w, c.offload_param, true); }, {});
  v.unsupported(
      {{"round_robin_gradients", Unsupported::kNoEffect, "offload copies are not round-robined"},
       {"elastic_checkpoint", Unsupported::kNoEffect,
        "checkpoints reshard to any world size anyway"},
       {"ignore_unused_parameters", Unsupported::kNoEffect,
        "unused parameters get zero gradients, never an error", "true"},
       {"legacy_stage1", Unsupported::kNoEffect, "one stage-1 implementation"},
       {"load_from_fp32_weights", Unsupported::kNoEffect,
        "checkpoints always restore the fp32 masters", "true"},
       {"stage3_model_persistence_threshold", Unsupported::kNoEffect,
        "no cap on persistent parameters besides stage3_param_persistence_threshold"},
       {"model_persistence_threshold", Unsupported::kNoEffect,
        "no cap on persistent parameters besides stage3_param_persistence_threshold"},
       {"zeropp_loco_param", Unsupported::kRefused, "ZeRO++ LoCo is not implemented"},
       {"memory_efficient_linear", Unsupported::kNoEffect, "no linear-layer override", "true"},
       {"pipeline_loading_checkpoint", Unsupported::kFeature, "no pipeline parallelism"},
       {"override_module_apply", Unsupported::kNoEffect, "no nn.Module.apply override", "true"},
       {"use_all_reduce_for_fetch_params", Unsupported::kNoEffect,
        "stage-3 gathers are all-gathers"},
       {"stage3_use_all_reduce_for_fetch_params", Unsupported::kNoEffect,
        "stage-3 gathers are all-gathers"},
       {"allgather_sequential", Unsupported::kNoEffect, "stage-3 gathers are bucketed per unit"},
       {"stage3_allgather_sequential", Unsupported::kNoEffect,
        "stage-3 gathers are bucketed per unit"},
       {"partition_stream_chunk_size", Unsupported::kNoEffect, "no streamed partitioning", "0"},
       {"stage3_partition_stream_chunk_size", Unsupported::kNoEffect, "no streamed partitioning",
        "0"},
       {"log_trace_cache_warnings", Unsupported::kNoEffect, "no trace cache"},
       {"enable_sanity_checks", Unsupported::kNoEffect, "no extra sanity checks"},
       {"save_muon_momentum_buffer_in_memory", Unsupported::kNoEffect,
        "Muon's momentum stays in the optimizer shards"},
       {"use_multi_rank_bucket_allreduce", Unsupported::kNoEffect,
        "gradients are reduce-scattered per bucket", "true"},
       {"zenflow", Unsupported::kRefused, "ZenFlow's stale-gradient updates are not implemented"},
       {"leaf_module", Unsupported::kNoEffect, "stage-3 units are the program's"}});
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
  v.unsupported({{"fp16_master_weights_and_grads", Unsupported::kRefused,
                  "masters and gradients stay fp32 (fp16 masters are not implemented)"}});
}

// The keys DeepSpeed's engine reads for Muon (_MUON_HALF_KEYS, _ADAM_HALF_KEYS, muon_lr,
// adam_lr, adam_w_mode), with MuonWithAuxAdam's defaults. DeepSpeed's muon_update always runs 5
// Newton-Schulz steps with Nesterov momentum and its engine never reads ns_steps or nesterov, so
// those warn unless they say what runs anyway.
template <typename V>
void visit_muon_params(V& w, OptimizerConfig& c) {
  w.field("weight_decay", c.weight_decay, auto_ok());
  w.field("momentum", c.muon.momentum, {});
  w.field("ns_method", c.muon.ns_method, {});
  w.field("muon_lr", c.muon.muon_lr, {});
  w.field("betas", c.muon.betas, {});
  w.field("eps", c.muon.eps, {});
  w.field("adam_lr", c.muon.adam_lr, {});
  w.field("adam_w_mode", c.adam_w_mode, {});
  w.unsupported(
      {{"ns_steps", Unsupported::kNoEffect,
        "DeepSpeed's Muon does not read it and always runs 5 Newton-Schulz steps; so does "
        "zerotorch",
        "5"},
       {"nesterov", Unsupported::kNoEffect,
        "DeepSpeed's Muon does not read it and always uses Nesterov momentum; so does zerotorch",
        "true"},
       {"per_head_muon", Unsupported::kFeature,
        "per-head orthogonalisation is not implemented; every Muon matrix is orthogonalised whole"},
       {"torch_adam", Unsupported::kNoEffect, "the auxiliary Adam is zerotorch's own"},
       {"fp32_optimizer_states", Unsupported::kRefused, "optimizer states are always fp32",
        "true"}});
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
            if (c.type == OptimizerType::kMuon) {
              visit_muon_params(w, c);
              return;
            }
            w.field("betas", c.betas, auto_ok());
            if (c.type == OptimizerType::kLion) {
              w.field("weight_decay", c.weight_decay, auto_ok());
              return;
            }
            w.field("eps", c.eps, auto_ok());
            w.field("weight_decay", c.weight_decay, auto_ok());
            w.field("bias_correction", c.bias_correction, {});
            if (c.type == OptimizerType::kLamb) {
              // DeepSpeed's FusedLamb arguments.
              w.field("max_coeff", c.max_coeff, {});
              w.field("min_coeff", c.min_coeff, {});
              w.field("eps_inside_sqrt", c.eps_inside_sqrt, {});
              w.unsupported({{"max_grad_norm", Unsupported::kRefused,
                              "FusedLamb's own clipping is not implemented; use gradient_clipping"},
                             {"amsgrad", Unsupported::kRefused, "FusedLamb has no AMSGrad"}});
              return;
            }
            if (c.type != OptimizerType::kAdam8bit) w.field("amsgrad", c.amsgrad, {});
            if (c.type == OptimizerType::kAdam || c.type == OptimizerType::kCpuAdam) {
              w.field("adam_w_mode", c.adam_w_mode, {});
            }
            if (c.type == OptimizerType::kAdam8bit) w.field("block_size", c.block_size, {});
            w.unsupported({{"torch_adam", Unsupported::kNoEffect,
                            "the step is zerotorch's own on flat shards"},
                           {"fp32_optimizer_states", Unsupported::kRefused,
                            "optimizer states are always fp32", "true"}});
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
            w.unsupported(
                {{"last_batch_iteration", Unsupported::kNoEffect,
                  "the schedule position comes from the step counter (and checkpoints)", "-1"}});
          },
          {});
}

template <typename V>
void visit_monitor(V& v, MonitorConfig& c) {
  v.field("enabled", c.enabled, {});
  v.field("output_path", c.output_path, {});
  v.field("job_name", c.job_name, {});
}

template <typename V>
void visit_activation_checkpointing(V& v, ActivationCheckpointingConfig& c) {
  // DeepSpeed reads this block key by key and ignores the rest ("comment" keys appear in real
  // files).
  v.unknown_keys_warn();
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
  // Ours: DeepSpeed's checkpoint block (deepspeed/runtime/constants.py: tag_validation,
  // load_universal, use_node_local_storage, parallel_write, checkpoint_serialization, writer)
  // has no save_dir, save_interval, keep_last or load_fallback.
  v.choice("load_fallback", c.load_fallback, kLoadFallbackNames, {});
  v.block("writer",
          [&](auto& w) {
            w.field("decoupled", c.writer.decoupled, {});
            w.field("type", c.writer.type, {});
            w.field("io_buffer_size", c.writer.io_buffer_size, {});
            w.field("io_buffer_double", c.writer.io_buffer_double, {});
            w.field("show_statistics", c.writer.show_statistics, {});
            w.field("data_parallel", c.writer.data_parallel, {});
            w.field("io_multiplier", c.writer.io_multiplier, {});
          },
          {});
  v.block("parallel_write",
          [&](auto& w) { w.field("pipeline_stage", c.parallel_write_pipeline_stage, {}); }, {});
  v.unsupported(
      {{"load_universal", Unsupported::kNoEffect, "every zerotorch checkpoint reshards on load"},
       {"use_node_local_storage", Unsupported::kFeature, "checkpoints go to save_dir"}});
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

// DeepSpeed reads the block as a plain dict; here it is strict like the other blocks.
template <typename V>
void visit_elasticity(V& v, ElasticityConfig& c) {
  v.field("enabled", c.enabled, {});
  v.field("max_train_batch_size", c.max_train_batch_size, {});
  v.field("micro_batch_sizes", c.micro_batch_sizes, {});
  v.field("min_gpus", c.min_gpus, {});
  v.field("max_gpus", c.max_gpus, {});
  v.field("min_time", c.min_time, {});
  v.field("version", c.version, {});
  v.field("prefer_larger_batch", c.prefer_larger_batch, {});
  v.field("ignore_non_elastic_batch_info", c.ignore_non_elastic_batch_info, {});
  v.field("num_gpus_per_node", c.num_gpus_per_node, {});
  v.field("model_parallel_size", c.model_parallel_size, {});
  // The attribute DeepSpeed stores prefer_larger_batch in; as a key DeepSpeed never reads it.
  v.unsupported({{"prefer_larger_batch_size", Unsupported::kNoEffect,
                  "DeepSpeed reads prefer_larger_batch, not this name; set that key", "true"}});
}

// DeepSpeed 0.19's CompileConfig (deepspeed/compile/config.py). engine.compile() (the Python front
// door's) compiles the module with torch.compile whatever this block says, as DeepSpeed does
// with deepcompile off; every other key configures DeepCompile's passes, which DeepSpeed too
// reads only with deepcompile on.
template <typename V>
void visit_compile(V& v) {
  using U = Unsupported;
  constexpr const char* kPass = "a DeepCompile option; DeepCompile is not implemented";
  v.unsupported(
      {{"deepcompile", U::kRefused,
        "DeepCompile's passes are not implemented; engine.compile() compiles the module with "
        "torch.compile (deepcompile: false)"},
       {"autoep_non_moe", U::kRefused, "no AutoEP layers to leave eager"},
       {"free_activation", U::kNoEffect, kPass},
       {"free_activation_threshold", U::kNoEffect, kPass, "10485760"},
       {"offload_activation", U::kNoEffect, kPass},
       {"offload_activation_pin_memory", U::kNoEffect, kPass, "true"},
       {"offload_opt_states", U::kNoEffect, kPass},
       {"double_buffer", U::kNoEffect, kPass, "true"},
       {"symmetric_memory", U::kNoEffect, kPass},
       {"debug_log", U::kNoEffect, kPass},
       {"offload_parameters", U::kNoEffect, kPass},
       {"sync_before_reduce", U::kNoEffect, kPass},
       {"sync_after_reduce", U::kNoEffect, kPass},
       {"sync_before_allgather", U::kNoEffect, kPass},
       {"sync_after_allgather", U::kNoEffect, kPass},
       {"keep_int_input_tensors", U::kNoEffect, kPass, "true"},
       {"keep_all_input_tensors", U::kNoEffect, kPass},
       {"passes", U::kNoEffect, kPass}});
}

// DeepSpeed 0.19's TPTrainingConfig (deepspeed/runtime/tensor_parallel/config.py).
template <typename V>
void visit_tensor_parallel(V& v, Config::TensorParallel& c) {
  v.field("autotp_size", c.autotp_size, {});
  v.field("preset_model", c.preset_model, {});
  v.field("partition_config", c.partition_config, {});
  v.block(
      "tp",
      [&](auto& w) {
        w.field("tp_size", c.tp_size, {});
        w.unsupported(
            {{"tp_grain_size", Unsupported::kNoEffect,
              "MLP features split one at a time, the first ranks one more where the group "
              "does not divide them (DeepSpeed rounds MLP slices to this grain; the "
              "numbers trained are the same)",
              "1"},
             {"mpu", Unsupported::kRefused,
              "the mesh comes from the topology, not from an mpu object"},
             {"tp_group", Unsupported::kRefused,
              "the tensor groups come from the topology (consecutive ranks)"}});
      },
      also_named("tensor_parallel"));
  v.unsupported(
      {{"tp_overlap_comm", Unsupported::kNoEffect,
        "the row-parallel all-reduce is not overlapped with compute", "false"},
       {"dtype", Unsupported::kNoEffect, "the training dtype comes from the fp16 and bf16 blocks"},
       {"vocab_parallel_lm_head", Unsupported::kRefused,
        "the head and embeddings stay whole on every rank of a tensor group"},
       {"vocab_parallel_ce_backend", Unsupported::kNoEffect,
        "the loss runs on the whole vocabulary", "torch"},
       {"keep_module_on_host", Unsupported::kNoEffect,
        "weights are split on the host before the engine places them"},
       {"replace_with_kernel_inject", Unsupported::kRefused, "no inference kernels are injected"},
       {"kernel_inject", Unsupported::kRefused, "no inference kernels are injected"},
       {"injection_policy_tuple", Unsupported::kRefused,
        "the model names its split layers itself"}});
}

// DeepSpeed 0.19's AutoEP block (deepspeed/module_inject/auto_ep_config.py parse_autoep_config).
// Keys that change the routing are refused away from DeepSpeed's defaults (the model's router
// routes: its num_experts_per_tok, softmax, renormalisation); the ones that say where the MoE
// layers are, or how AutoEP computes them, have no counterpart.
template <typename V>
void visit_expert_parallel(V& v, Config::ExpertParallel& c) {
  v.field("enabled", c.enabled, {});
  v.field("autoep_size", c.autoep_size, {});
  v.field("preset_model", c.preset_model, {});
  using U = Unsupported;
  constexpr const char* kRoute =
      "the model's own router routes (its num_experts_per_tok, softmax "
      "and renormalisation)";
  constexpr const char* kLayers = "the model's own MoE layers train as they are";
  v.unsupported(
      {{"load_balance_coeff", U::kRefused,
        "auxiliary-loss-free balancing (expert biases) is not implemented, as DeepSpeed 0.19.8 "
        "refuses it too; the auxiliary loss is the model config's router_aux_loss_coef"},
       {"expert_tensor_parallel_size", U::kRefused, "experts are not split over a tensor group",
        "1"},
       {"top_k", U::kRefused, kRoute, "auto"},
       {"score_func", U::kRefused, kRoute, "auto"},
       {"route_norm", U::kRefused, kRoute},
       {"route_scale", U::kRefused, kRoute, "1.0"},
       {"routed_scaling_factor", U::kRefused, kRoute, "auto"},
       {"num_expert_groups", U::kRefused, "no grouped routing"},
       {"num_limited_groups", U::kRefused, "no grouped routing"},
       {"moe_layer_pattern", U::kNoEffect, kLayers},
       {"expert_pattern", U::kNoEffect, kLayers},
       {"router_pattern", U::kNoEffect, kLayers},
       {"expert_w1", U::kNoEffect, kLayers},
       {"expert_w2", U::kNoEffect, kLayers},
       {"expert_w3", U::kNoEffect, kLayers},
       {"num_experts_attr", U::kNoEffect, kLayers},
       {"top_k_attr", U::kNoEffect, kLayers},
       {"has_shared_experts", U::kNoEffect, kLayers},
       {"shared_experts_pattern", U::kNoEffect, kLayers},
       {"shared_experts_gate_pattern", U::kNoEffect, kLayers},
       {"expert_activation", U::kNoEffect, kLayers},
       {"use_grouped_mm", U::kNoEffect, kLayers, "true"},
       {"disable_triton_grouped_mm", U::kNoEffect, kLayers},
       {"gate_up_impl", U::kNoEffect, kLayers, "separate"},
       {"combine_impl", U::kNoEffect, kLayers, "auto"},
       {"row_weighting_impl", U::kNoEffect, kLayers, "auto"},
       {"score_apply", U::kNoEffect, kLayers, "auto"},
       {"comm_backend", U::kNoEffect, "no token exchange: experts are on every rank", "comm"},
       {"comm_num_sm", U::kNoEffect, "no token exchange: experts are on every rank", "12"},
       {"comm_qp_margin", U::kNoEffect, "no token exchange: experts are on every rank", "4"},
       {"comm_max_tokens_per_rank", U::kNoEffect, "no token exchange: experts are on every rank",
        "0"},
       {"validate_folding_routing", U::kNoEffect, "no expert folding"},
       {"async_split_plan", U::kNoEffect, "no expert folding"}});
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
  v.field("dataloader_drop_last", c.dataloader_drop_last, {});
  v.block("zero_optimization", [&](auto& w) { visit_zero(w, c.zero_optimization); }, {});
  v.block("fp16", [&](auto& w) { visit_fp16(w, c.fp16); }, {});
  v.block(
      "bf16",
      [&](auto& w) {
        w.field("enabled", c.bf16.enabled, auto_ok());
        w.unsupported({
            {"immediate_grad_update", Unsupported::kNoEffect,
             "gradients are reduced per bucket as they are ready", "true"},
        });
        w.field("check_grad_overflow", c.bf16.check_grad_overflow, {});
        w.field("bf16_master_weights_and_grads", c.bf16.bf16_master_weights_and_grads, {});
        w.field("bf16_optimizer_states", c.bf16.bf16_optimizer_states, {});
      },
      also_named("bfloat16"));
  v.block("data_types",
          [&](auto& w) {
            w.choice("grad_accum_dtype", c.data_types.grad_accum_dtype, kDTypeNames, {});
          },
          {});
  v.choice("communication_data_type", c.communication_data_type, kCommDTypeNames, {});
  v.field("sequence_parallel_size", c.sequence_parallel_size, {});
  v.choice("seq_parallel_communication_data_type", c.seq_parallel_communication_data_type,
           kCommDTypeNames, {});
  v.block("tensor_parallel", [&](auto& w) { visit_tensor_parallel(w, c.tensor_parallel); }, {});
  v.field("prescale_gradients", c.prescale_gradients, {});
  v.field("gradient_predivide_factor", c.gradient_predivide_factor, {});
  v.optional_block("optimizer", c.optimizer,
                   [](auto& w, OptimizerConfig& o) { visit_optimizer(w, o); });
  v.optional_block("scheduler", c.scheduler,
                   [](auto& w, SchedulerConfig& s) { visit_scheduler(w, s); });
  v.block("activation_checkpointing",
          [&](auto& w) { visit_activation_checkpointing(w, c.activation_checkpointing); }, {});
  v.block("checkpoint", [&](auto& w) { visit_checkpoint(w, c.checkpoint); }, {});
  v.block("swa",
          [&](auto& w) {
            w.field("enabled", c.swa.enabled, {});
            w.field("swa_start", c.swa.swa_start, {});
            w.field("swa_freq", c.swa.swa_freq, {});
          },
          {});
  v.block(
      "communication",
      [&](auto& w) {
        w.choice("backend", c.communication.backend, kCommBackendNames, {});
        w.field("timeout", c.communication.timeout, {});
        w.field("max_inflight_reductions", c.communication.max_inflight_reductions, {});
      },
      also_named("comms"));
  v.block("data", [&](auto& w) { visit_data(w, c.data); }, {});
  v.block("memory_plan",
          [&](auto& w) {
            w.field("enabled", c.memory_plan.enabled, {});
            w.field("device_limit_gib", c.memory_plan.device_limit_gib, {});
            w.field("host_limit_gib", c.memory_plan.host_limit_gib, {});
            w.field("nvme_limit_gib", c.memory_plan.nvme_limit_gib, {});
            w.field("start_anyway", c.memory_plan.start_anyway, {});
          },
          {});
  v.field("freeze", c.freeze, {});
  v.block("parameter_groups",
          [&](auto& w) {
            w.field("no_decay", c.parameter_groups.no_decay, {});
            w.field("layer_lr_decay", c.parameter_groups.layer_lr_decay, {});
          },
          {});
  v.block("tensorboard", [&](auto& w) { visit_monitor(w, c.tensorboard); }, {});
  v.block("csv_monitor", [&](auto& w) { visit_monitor(w, c.csv_monitor); }, {});
  v.block("aio", [&](auto& w) { visit_aio(w, c.aio); }, {});
  v.block("comms_logger",
          [&](auto& w) {
            w.field("enabled", c.comms_logger.enabled, {});
            w.field("verbose", c.comms_logger.verbose, {});
            w.field("prof_all", c.comms_logger.prof_all, {});
            w.field("prof_ops", c.comms_logger.prof_ops, {});
            w.field("debug", c.comms_logger.debug, {});
          },
          {});
  v.block("flops_profiler",
          [&](auto& w) {
            w.field("enabled", c.flops_profiler.enabled, {});
            w.field("profile_step", c.flops_profiler.profile_step, {});
            w.field("module_depth", c.flops_profiler.module_depth, {});
            w.field("top_modules", c.flops_profiler.top_modules, {});
            w.field("detailed", c.flops_profiler.detailed, {});
            w.field("output_file", c.flops_profiler.output_file, {});
            w.field("recompute_fwd_factor", c.flops_profiler.recompute_fwd_factor, {});
            w.field("peak_tflops", c.flops_profiler.peak_tflops, {});
          },
          {});
  v.block("elasticity", [&](auto& w) { visit_elasticity(w, c.elasticity); }, {});
  v.block("compile", [&](auto& w) { visit_compile(w); }, {});
  v.block("expert_parallel", [&](auto& w) { visit_expert_parallel(w, c.expert_parallel); }, {});
  // DeepSpeed's top level ignores keys it does not know: so do we, with a warning each.
  v.unknown_keys_warn();
  using U = Unsupported;
  v.unsupported(
      {{"wandb", U::kFeature, "no network access: use tensorboard or csv_monitor"},
       {"comet", U::kFeature, "no network access: use tensorboard or csv_monitor"},
       {"trackio", U::kFeature, "use tensorboard or csv_monitor"},
       {"pipeline", U::kFeature, "no pipeline parallelism"},
       {"autotuning", U::kFeature, "no autotuner"},
       {"compression_training", U::kRefused, "compression training is not implemented"},
       // Read by the model's own DeepSpeed sparse-attention layers, which zerotorch programs
       // cannot call: the program decides its attention.
       {"sparse_attention", U::kFeature,
        "no sparse-attention kernels; the program's attention runs"},
       {"curriculum_learning", U::kRefused, "curriculum learning is not implemented"},
       {"data_efficiency", U::kRefused,
        "data efficiency (curriculum, random-LTD) is not implemented"},
       {"progressive_layer_drop", U::kRefused, "progressive layer drop is not implemented"},
       {"eigenvalue", U::kFeature, "no eigenvalue computation"},
       {"quantize_training", U::kRefused, "quantize-aware training is not implemented"},
       {"weight_quantization", U::kRefused, "weight quantization is not implemented"},
       {"hybrid_engine", U::kFeature, "no RLHF hybrid engine"},
       {"nebula", U::kFeature, "no Nebula checkpoint service"},
       {"amp", U::kRefused, "apex AMP is not implemented; use fp16 or bf16"},
       {"torch_autocast", U::kRefused, "autocast is not implemented; use fp16 or bf16"},
       {"zero_allow_untested_optimizer", U::kNoEffect, "every optimizer runs at every stage",
        "true"},
       {"zero_force_ds_cpu_optimizer", U::kNoEffect, "optimizer offload always steps with CpuAdam",
        "true"},
       {"sparse_gradients", U::kNoEffect, "gradients are dense flat buffers"},
       {"dump_state", U::kNoEffect, "no state dump"},
       {"memory_breakdown", U::kNoEffect, "no memory breakdown (see Engine::memory)"},
       {"disable_allgather", U::kNoEffect, "gathers follow the ZeRO stage"},
       {"timers", U::kNoEffect, "timing follows wall_clock_breakdown"},
       {"graph_harvesting", U::kNoEffect, "no CUDA-graph harvesting"},
       {"load_universal_checkpoint", U::kNoEffect, "every checkpoint reshards on load"},
       {"use_data_before_expert_parallelism", U::kNoEffect,
        "DeepSpeed's native MoE layers under tensor parallelism are not built; the expert_parallel "
        "block's exchange keeps each rank's own tokens"}});
}

}  // namespace zt::config_schema
