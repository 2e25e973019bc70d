#pragma once
// zt::Config: the typed, resolved training configuration (docs/DESIGN.md, Config).
//
// One schema, read from JSON or YAML, with DeepSpeed's key names, meanings and defaults for
// what both have, plus blocks of our own (`communication`, `data`, `freeze`, `parameter_groups`),
// and blocks that belong to the program (`model`: program_block.h), kept unread. A DeepSpeed
// user hands over the file they already have:
//  - JSON is read as DeepSpeed reads it, with hjson's leniencies (core/config/hjson.h: `//`, `#`
//    and `/* */` comments, trailing commas, a line break for a comma); errors keep line/column;
//  - DeepSpeed's older forms still read (legacy.cpp: "zero_optimization": true/false,
//    cpu_offload*, bfloat16, stage3_gather_fp16_weights_on_model_save, the unprefixed stage-3
//    names), each with a warning;
//  - numbers written as 2e8 or 1e14 fill integer fields (2.5 does not);
//  - booleans must be JSON booleans (true/false, not "true", 1 or yes);
//  - "auto" is resolved as the Hugging Face Trainer fills it (from ProgramValues, which
//    CliOptions gives with the Trainer's flags and defaults); the values that need the built
//    model (bucket sizes from the hidden size) or the step count wait in pending_autos for
//    resolve_program_autos; any other unresolved "auto" is an error naming the key;
//  - where DeepSpeed is strict (zero_optimization, the offload blocks, fp16, bf16, the monitor
//    blocks, optimizer/scheduler params) an unknown key is an error with its full path and the
//    closest known key; where it ignores (the top level, activation_checkpointing) a warning;
//  - a DeepSpeed key zerotorch does not act on says so once (schema.h, UnsupportedKey): a
//    warning when ignoring it trains the same model, an error when memory or numerics would
//    differ (offload_param, ZeRO++ quantization, 1-bit optimizers, ...).
// All problems of a file are collected in one pass (check_config); load_config throws one
// zt::Error listing them. A Config is never partially valid: once returned it is immutable by
// convention (pass it as `const Config&`), and to_json() writes it back in a form that loads
// to an equal Config (checkpoints store it; `zt-config validate` prints it).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/aio/aio_options.h"
#include "core/config/elasticity.h"
#include "core/config/program_block.h"
#include "core/config/zero_config.h"
#include "core/defaults.h"
#include "core/precision/loss_scaler_options.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer_kind.h"
#include "optim/param_group_defaults.h"
#include "parallel/backend.h"
#include "parallel/comms_logger_options.h"

namespace zt {

// A config value kept as written (any JSON value, as JSON text; empty when absent), for a part
// that reads it itself.
struct JsonText {
  std::string text;
  bool empty() const { return text.empty(); }
};

enum class DType { kFp32, kFp16, kBf16 };
// The config names the optimizer's kind with optim's enum (one list of optimizers); the reader
// accepts every kind but FusedAdam, which the engine picks itself for Adam/AdamW on a GPU.
using OptimizerType = optim::OptimizerKind;
// The scheduler's type and warm-up shape are optim's (optim/lr_schedule.h), so a typed block goes
// to the schedule as it is read.
using SchedulerType = optim::ScheduleKind;
using WarmupType = optim::WarmupShape;
// The backend is parallel/'s, so the config hands it to the communicator as it is read.
using CommBackend = dist::Backend;
enum class TagValidation { kIgnore, kWarn, kFail };
enum class LoadFallback { kNone, kPrevious };

// Names as written in config files ("cpu", "bf16", "AdamW", "WarmupLR", "nccl", "Warn").
const char* to_string(OffloadDevice v);
const char* to_string(DType v);
const char* to_string(OptimizerType v);
const char* to_string(SchedulerType v);
const char* to_string(WarmupType v);
const char* to_string(CommBackend v);
const char* to_string(TagValidation v);
const char* to_string(LoadFallback v);

// fp16: DeepSpeed's dynamic loss scaler (loss_scale 0 = dynamic, starting at
// 2^initial_scale_power). The scaler's own options, read as they are (the engine takes them
// unchanged), plus the switches around them.
struct Fp16Config : LossScalerOptions {
  bool enabled = false;
  bool auto_cast = false;
};

struct Bf16Config {
  bool enabled = false;
  // DeepSpeed's bf16 masters: the stepped copy of the parameters and the gradient shard it steps
  // with are bf16 (2 bytes each instead of 4); the update is still computed in fp32 and rounded
  // to nearest even when stored. Stages 1-3.
  bool bf16_master_weights_and_grads = false;
  // Adam's two moments in bf16 too (needs bf16_master_weights_and_grads).
  bool bf16_optimizer_states = false;
  // false: at stages 1-2 a bf16 step whose gradients hold inf/NaN is not skipped (they reach the
  // optimizer). Stage 0 and stage 3 skip such a step whatever it says, as DeepSpeed's.
  bool check_grad_overflow = true;
};

// data_types: dtype gradients are accumulated in (unset = the training dtype).
struct DataTypesConfig {
  std::optional<DType> grad_accum_dtype;
};

// optimizer. Which params a type takes: Adam, AdamW, Adam8bit, CPUAdam take lr, betas, eps,
// weight_decay, bias_correction, amsgrad (not Adam8bit), adam_w_mode (Adam, CPUAdam); Adam8bit
// also block_size; SGD takes lr, momentum, dampening, weight_decay, nesterov. Others are errors.
// Type names are matched case-insensitively, as DeepSpeed does. Adam8bit is our block-wise 8-bit
// Adam; CPUAdam our vectorised CPU Adam for offload (DeepSpeed's DeepSpeedCPUAdam). Muon
// (DeepSpeed's MuonWithAuxAdam, optim/muon.h) takes lr, weight_decay (both halves), momentum,
// ns_method, muon_lr (its 2-D matrices), betas, eps, adam_lr (the auxiliary Adam's) and
// adam_w_mode, with DeepSpeed's defaults (MuonConfig).
struct MuonConfig {
  double momentum = 0.95;
  std::string ns_method = "gram";           // or "standard"
  std::vector<double> betas = {0.9, 0.95};  // the auxiliary Adam's (not Adam's 0.999)
  double eps = 1e-10;
  double muon_lr = -1;  // < 0: lr
  double adam_lr = -1;  // < 0: lr
};
struct OptimizerConfig {
  OptimizerType type = OptimizerType::kAdamW;
  double lr = 1e-3;
  std::vector<double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool bias_correction = true;
  bool amsgrad = false;
  bool adam_w_mode = true;    // DeepSpeed's default: Adam decouples weight decay unless told not to
  int64_t block_size = 2048;  // Adam8bit: elements per quantisation block
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  // Lamb (DeepSpeed's FusedLamb): the trust ratio ||w|| / ||update|| is clamped to
  // [min_coeff, max_coeff]; eps_inside_sqrt: sqrt(v + eps) instead of sqrt(v) + eps.
  double max_coeff = 10.0;
  double min_coeff = 0.01;
  bool eps_inside_sqrt = false;
  MuonConfig muon;  // type Muon only
};

// scheduler, with DeepSpeed's parameter names and defaults; which of them a type takes:
//   WarmupLR:        warmup_min_lr, warmup_max_lr, warmup_num_steps, warmup_type
//   WarmupDecayLR:   WarmupLR's + total_num_steps (required)
//   WarmupCosineLR:  total_num_steps (required), warmup_min_ratio, warmup_num_steps,
//                    cos_min_ratio, warmup_type
//   OneCycle:        cycle_min_lr, cycle_max_lr (required), decay_lr_rate, cycle_first_step_size,
//                    cycle_second_step_size, cycle_first_stair_count, cycle_second_stair_count,
//                    decay_step_size, cycle_momentum, cycle_min_mom, cycle_max_mom,
//                    decay_mom_rate
using SchedulerConfig = optim::ScheduleSpec;

struct ActivationCheckpointingConfig {
  bool partition_activations = false;
  bool contiguous_memory_optimization = false;
  bool cpu_checkpointing = false;
  std::optional<int64_t> number_checkpoints;
  bool synchronize_checkpoint_boundary = false;
  bool profile = false;
};

// checkpoint: DeepSpeed's tag_validation plus our save options. Tags are
// `<tag_prefix><global step>` (DeepSpeed's "global_step<N>").
struct CheckpointConfig {
  TagValidation tag_validation = TagValidation::kWarn;
  std::string save_dir;  // empty = the program decides
  std::string tag_prefix = "global_step";
  int64_t save_interval = 0;  // optimizer steps between saves; 0 = at the end only
  int64_t keep_last = 0;      // tags kept in save_dir; 0 = all
  // A corrupt or partial latest tag: kNone stops naming the file; kPrevious loads the newest
  // complete tag before it (train/checkpointing.h).
  LoadFallback load_fallback = LoadFallback::kNone;
  // DeepSpeed's checkpoint.writer, the block that selects its FastPersist and decoupled
  // checkpoint engines. decoupled: each save is snapshotted at the step boundary and written by
  // a background thread while training goes on (core/checkpoint/async_checkpoint.h). The other
  // keys tune DeepSpeed's own writer and have no counterpart here (warned when set).
  struct Writer {
    bool decoupled = false;
    std::string type = "fast";  // fast | python | mock (DeepSpeed's, any case)
    int64_t io_buffer_size = 64 << 20;
    bool io_buffer_double = true;
    bool show_statistics = false;
    std::string data_parallel;  // replica | socket | machine; empty: DeepSpeed's null
    int64_t io_multiplier = 1;
  } writer;
  // DeepSpeed's checkpoint.parallel_write.pipeline_stage: pipeline stages write their layers in
  // parallel. zerotorch has no pipeline parallelism; every rank writes its own shard anyway.
  bool parallel_write_pipeline_stage = false;
};

// swa: our block, stochastic weight averaging of the fp32 masters (optim/swa.h). Key names
// are torchcontrib's SWA(optimizer, swa_start, swa_freq) (optim/swa_spec.h): average after
// optimizer step t when t > swa_start and t % swa_freq == 0.
struct SwaConfig {
  bool enabled = false;
  int64_t swa_start = 0;
  int64_t swa_freq = 1;
};

// memory_plan: our block. The per-rank memory plan (core/plan/memory_plan.h) is logged at
// start and a run it says cannot fit is refused before the model is built, naming the largest
// part and the config changes that would fit. Limits in GiB; 0 = what the machine has: the
// device's free memory (CUDA; none for other devices), MemAvailable for host memory, the free
// space at the NVMe path (host and NVMe shared by a node's ranks). start_anyway: log the refusal
// and start.
struct MemoryPlanConfig {
  bool enabled = true;
  double device_limit_gib = 0;
  double host_limit_gib = 0;
  double nvme_limit_gib = 0;
  bool start_anyway = false;
};

// communication (also read as `comms`): our block. timeout bounds every collective;
// max_inflight_reductions bounds the gradient buckets being reduced at once (each holds a
// transient reduction buffer), trading memory for overlap.
struct CommunicationConfig {
  CommBackend backend = CommBackend::kAuto;
  int64_t timeout = 1800;  // seconds
  int64_t max_inflight_reductions = defaults::kMaxInflightReductions;
};

// data: our block for the token-shard pipeline (docs/DESIGN.md, Data).
struct DataConfig {
  std::string path;             // token shard prefix or directory
  int64_t max_length = 1024;    // samples are cut to this many tokens
  int64_t max_tokens = 0;       // > 0: batches sized by padded-token budget, not sample count
  bool bucketing = true;        // sort by length inside shuffled mega-batches
  int64_t pad_to_multiple = 1;  // pad each batch's length up to a multiple of this
  bool shuffle = true;
  std::optional<int64_t> seed;   // unset = the top-level seed
  int64_t mega_batch_mult = 50;  // mega-batch = mult * batch, the span sorted by length
  bool drop_last = false;
};

// tensorboard / csv_monitor: DeepSpeed's monitor blocks. Rank 0 writes to
// <output_path>/<job_name>/ (output_path empty: the working directory), see train/monitor/.
struct MonitorConfig {
  bool enabled = false;
  std::string output_path;
  std::string job_name = "DeepSpeedJobName";
};

// comms_logger: DeepSpeed's block, per op and message size counts, latency and bandwidth: the
// logger's own options, read as they are (parallel/comms_logger.h says where zerotorch and
// DeepSpeed differ).
using CommsLoggerConfig = dist::CommsLoggerOptions;

// flops_profiler: DeepSpeed's block (core/profile/flops_profiler.h), DeepSpeed's defaults, plus
// peak_tflops, zerotorch's own: the device's peak for MFU where the table does not know it.
struct FlopsProfilerConfig {
  bool enabled = false;
  int64_t profile_step = 1;
  int64_t module_depth = -1;
  int64_t top_modules = 1;
  bool detailed = true;
  std::string output_file;
  double recompute_fwd_factor = 0.0;  // DeepSpeed's backward estimate; the backward is counted
  double peak_tflops = 0.0;
};

// parameter_groups: how the optimizer splits parameters (optim/param_groups.h applies them).
struct ParameterGroupsConfig {
  // Parameters whose name contains one of these substrings get weight_decay 0.
  std::vector<std::string> no_decay = optim::default_no_decay_patterns();
  double layer_lr_decay = 1.0;  // layer-wise LR decay factor in (0, 1]; 1 = off
};

struct Config {
  // The batch triple, resolved: train_batch_size = micro * accumulation * world_size.
  int64_t train_batch_size = 0;
  int64_t train_micro_batch_size_per_gpu = 0;
  int64_t gradient_accumulation_steps = 1;
  // Max global L2 norm; 0 = off. DeepSpeed 0.19's default clips at 1.0 (GRADIENT_CLIPPING_DEFAULT).
  double gradient_clipping = 1.0;
  int64_t steps_per_print = 10;
  bool wall_clock_breakdown = false;
  int64_t seed = 42;
  // DeepSpeed's top-level key for its data loader (deepspeed_io); true makes data.drop_last true,
  // which every loader here follows (the programs' and the Python package's).
  bool dataloader_drop_last = false;

  ZeroConfig zero_optimization;
  Fp16Config fp16;
  Bf16Config bf16;  // also read as `bfloat16`
  DataTypesConfig data_types;
  std::optional<DType> communication_data_type;  // unset = the training dtype
  // Ulysses sequence parallelism: ranks that split each batch's sequence (parallel/topology.h).
  // The batch triple counts data-parallel ranks, world / sequence_parallel_size, as DeepSpeed's.
  int sequence_parallel_size = 1;
  // With sequence_parallel_size > 1 DeepSpeed reduces gradients in this dtype (its engine makes
  // it the communication_data_type; default fp32); the all-to-alls of the attention exchange
  // move it too. Without sequence parallelism it does nothing, and says so.
  std::optional<DType> seq_parallel_communication_data_type;
  // DeepSpeed's tensor_parallel block (AutoTP training): autotp_size ranks split each layer of a
  // model that can split (the LLaMA family: train_llama), innermost in the mesh
  // (parallel/topology.h). The batch triple counts world / (sequence_parallel_size · tp) ranks.
  struct TensorParallel {
    int autotp_size = 0;       // 0 or 1: off (DeepSpeed's default 0)
    std::string preset_model;  // empty, or DeepSpeed's "llama" / "qwen2": the split the model makes
    int tp_size = 1;           // the `tp` sub-block's; 1 or autotp_size, as DeepSpeed requires
    // DeepSpeed's AutoTPConfig as written (layer_specs of name patterns with a row / column /
    // skip split): read by the Python front door, which splits a Python model by it
    // (python/zerotorch/model_parallel.py); the C++ LLaMA family splits as the llama preset and
    // refuses it.
    JsonText partition_config;
    int size() const { return autotp_size > 1 ? autotp_size : 1; }
  } tensor_parallel;
  // DeepSpeed 0.19's AutoEP block (module_inject/auto_ep_config.py). A mixture of experts trains
  // with its own layers (models/llama/llama_moe.h, or a transformers model's). At autoep_size 1
  // every expert is on every rank, ZeRO-sharded with the other parameters; above it each layer's
  // experts are dealt over expert groups of that many consecutive ranks (parallel/topology.h),
  // which the C++ LLaMA family does (train_llama); other programs refuse it (train/initialize.h).
  struct ExpertParallel {
    bool enabled = false;
    int autoep_size = 1;
    std::string preset_model;  // which model's layers are the experts: the model's own say
    int size() const { return enabled && autoep_size > 1 ? autoep_size : 1; }
  } expert_parallel;
  // Where the 1/world_size of the gradient average is applied (EngineOptions says how).
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  std::optional<OptimizerConfig> optimizer;  // unset = the program builds its own
  std::optional<SchedulerConfig> scheduler;  // unset = constant LR
  ActivationCheckpointingConfig activation_checkpointing;
  CheckpointConfig checkpoint;
  SwaConfig swa;
  MemoryPlanConfig memory_plan;
  CommunicationConfig communication;
  DataConfig data;
  // Glob patterns (* and ? match any character) over full parameter names: never trained.
  std::vector<std::string> freeze;
  ParameterGroupsConfig parameter_groups;
  MonitorConfig tensorboard;
  MonitorConfig csv_monitor;
  CommsLoggerConfig comms_logger;
  FlopsProfilerConfig flops_profiler;
  // aio: the asynchronous I/O of NVMe offload (core/aio/aio_options.h, DeepSpeed's defaults);
  // thread_count is also read under its newer name intra_op_parallelism.
  aio::AioOptions aio;
  // elasticity: DeepSpeed's elastic batch (core/config/elasticity.h). When enabled it decides
  // the batch triple at the world size resolved for.
  ElasticityConfig elasticity;

  // Keys given as "auto" whose value needs what only the running program knows: the model's
  // hidden size (the ZeRO bucket sizes) or its step count (the scheduler's step counts). They
  // hold DeepSpeed's defaults until resolve_program_autos fills them; engine_options_from_config
  // refuses a config that still has any.
  std::vector<std::string> pending_autos;

  // The world size the batch triple was resolved for.
  int world_size = 1;

  // Top-level blocks that belong to the program (program_block.h), by name, unread.
  std::map<std::string, ProgramBlock> program_blocks;
  // The program's block `name`; an empty block of that name when the config has none.
  ProgramBlock program_block(const std::string& name) const;

  // The resolved config as JSON (DeepSpeed key names; every key written, so defaults show).
  // Loading it again with the same world size gives an equal Config. world_size is not written;
  // to reload at another world size, override one batch key: train_batch_size=auto keeps the
  // per-GPU micro batch and accumulation, and scales the global batch.
  std::string to_json(bool pretty = true) const;
};

// Equal when every field is (compared through to_json, so no field can be forgotten) and the
// world sizes agree.
bool operator==(const Config& a, const Config& b);
inline bool operator!=(const Config& a, const Config& b) {
  return !(a == b);
}

// Values the program knows that "auto" keys are resolved from (unset = unknown), as the
// Hugging Face Trainer fills them from its arguments (CliOptions::program_values gives the
// Trainer's flags and defaults).
struct ProgramValues {
  std::optional<int64_t> micro_batch_size;             // train_micro_batch_size_per_gpu
  std::optional<int64_t> gradient_accumulation_steps;  // gradient_accumulation_steps
  std::optional<double> gradient_clipping;             // gradient_clipping
  std::optional<bool> fp16;                            // fp16.enabled
  std::optional<bool> bf16;                            // bf16.enabled
  std::optional<double> lr;                            // optimizer lr, scheduler warmup_max_lr
  std::optional<std::vector<double>> betas;            // optimizer betas
  std::optional<double> eps;                           // optimizer eps
  std::optional<double> weight_decay;                  // optimizer weight_decay
  // scheduler warmup_num_steps: warmup_steps when > 0, else ceil(warmup_ratio * total_steps)
  // (the Trainer's get_warmup_steps).
  std::optional<int64_t> warmup_steps;
  std::optional<double> warmup_ratio;
  std::optional<int64_t> total_steps;  // scheduler total_num_steps
  // Model hidden size: reduce_bucket_size = h^2,
  // stage3_prefetch_bucket_size = 0.9 h^2, stage3_param_persistence_threshold = 10 h.
  std::optional<int64_t> hidden_size;
  // Else the integer at this key of a program block, "<block>.<key>" ("model.d_model"): the
  // program says where its hidden size is written; the framework knows no program keys.
  std::string hidden_size_key;
  // zero_optimization.stage3_gather_16bit_weights_on_model_save (unset: false, as Accelerate).
  std::optional<bool> save_16bit_model;
  // Where each value came from, by field name ("micro_batch_size" ->
  // "--per-device-train-batch-size 8, its default"), for the lines that say why an "auto" got
  // its value. A field without an entry reads "given by the program".
  std::map<std::string, std::string> origin;
};

enum class ConfigFormat { kJson, kYaml };

// The outcome of reading a config: the Config when there were no errors, and every error and
// warning found, each one line starting with the key path it is about.
struct ConfigReport {
  std::optional<Config> config;
  std::vector<std::string> errors;
  std::vector<std::string> warnings;
  // One line per "auto" key: `<key> = <value> (<why>)`, or `<key>: pending (<what it waits
  // for>)` for Config::pending_autos.
  std::vector<std::string> autos;
};

// Reads, overrides ("a.b=value", applied in order before validation; the value is a YAML
// scalar or flow sequence: 3, 2e8, true, auto, [0.9, 0.95]), resolves and validates. Never
// throws for a bad config. The format of a file is chosen by its extension (.json, else YAML;
// JSON is read as YAML either way). Syntax errors read "line L, column C: ... syntax error".
ConfigReport check_config(const std::string& text, ConfigFormat format,
                          const std::vector<std::string>& overrides, int world_size,
                          const ProgramValues& program = {});
ConfigReport check_config_file(const std::string& path, const std::vector<std::string>& overrides,
                               int world_size, const ProgramValues& program = {});

// As check_config, but logs each warning (ZT_LOG_WARN) and throws one zt::Error whose message
// is `<source>: N error(s): <first>; <second>; ...`. load_config also logs the resolved config
// once (ZT_LOG_INFO, rank 0).
Config parse_config(const std::string& text, ConfigFormat format,
                    const std::vector<std::string>& overrides, int world_size,
                    const ProgramValues& program = {});
Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   int world_size, const ProgramValues& program = {});
// As load_config, for a config given as JSON text (the Python package's dict); `source` names it
// in the messages.
Config load_config_text(const std::string& json, const std::string& source,
                        const std::vector<std::string>& overrides, int world_size,
                        const ProgramValues& program = {});

// The top-level keys of a config file as written (read as load_config reads it; no overrides,
// no defaults): which blocks the file gives. An unreadable file is an error naming it.
std::vector<std::string> config_file_keys(const std::string& path);

// Resolves the pending "auto" keys (Config::pending_autos) that `program` now answers:
// hidden_size (the model's largest hidden size, as the Trainer takes it) gives
// reduce_bucket_size = h^2, stage3_prefetch_bucket_size = 0.9 h^2 and
// stage3_param_persistence_threshold = 10 h; total_steps (and warmup) the scheduler's step
// counts. Returns one line per value chosen (as ConfigReport::autos); keys still unanswered stay
// pending. zt::initialize calls it once the model is built.
std::vector<std::string> resolve_program_autos(Config& config, const ProgramValues& program);

}  // namespace zt
