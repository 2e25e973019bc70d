#pragma once
// zt::initialize: what a training program needs from a config, in the spirit of
// deepspeed.initialize. Two calls, because a model's shape may come from the config (the GPT
// example's `model` block) and its initial weights should follow the config's seed:
//
//   zt::Launch launch = zt::launch(cli);                 // env -> config -> communicator -> seed
//   Gpt model(shape_from(launch.config.program_block("model")));
//   zt::Training t = zt::initialize(std::move(launch), model.ptr(),
//                                   {.units = model->unit_names(), .train_data = shard});
//   for (...) {
//     data::Batch b = *t.loader->next();
//     at::Tensor loss = t.engine->forward([&] { return model->loss(b); });
//     t.engine->backward(loss);
//     t.engine->step();
//   }
//
// At stage 3 the model can be built partitioned, unit by unit, so that no rank holds all of it:
//
//   Gpt model(shape, launch.partitioned.get());   // null at stages 0-2: built whole
//
// launch(): the launch environment (parallel/env.h: ztrun, torchrun, mpirun, srun or none) gives
// the world size; the config file is read with the --set overrides and resolved for it
// (core/config/config.h); the device is resolved (train/device.h, --device); the communicator is
// created from the config's `communication` block for that device (parallel/dist.h), and no two
// ranks of a machine may share the device; torch's generator is seeded with the config's `seed`.
// initialize(): the config's `freeze` globs set requires_grad false (freeze.h), then the engine
// is built from the config (core/config/engine_config.h: ZeRO stage, precision, optimizer,
// parameter groups, LR schedule, accumulation, clipping), and, given a token dataset, the
// training BatchStream from the config's `data` block (batch_stream.h).

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <torch/nn/module.h>

#include "core/config/cli_options.h"
#include "core/config/config.h"
#include "core/engine.h"
#include "core/plan/memory_plan.h"
#include "core/zero/partitioned_init.h"
#include "optim/lr_schedule.h"
#include "parallel/communicator.h"
#include "parallel/env.h"
#include "train/batch_stream.h"
#include "train/monitor/monitor.h"

namespace zt {

struct LaunchOptions {
  std::string config_path = {};             // JSON or YAML
  std::vector<std::string> overrides = {};  // "a.b=value", applied in order
  ProgramValues program = {};               // what "auto" keys resolve from
  // Where the model trains (train/device.h: "" or "auto", cpu, cuda, cuda:N, zttest, zttest:N).
  std::string device = {};
  std::string config_text = {};  // the config itself as JSON, instead of config_path
};

// The job as launched: this process's place in it, the resolved config, the communicator.
struct Launch {
  dist::Env env;
  Config config;
  std::shared_ptr<dist::Communicator> comm;
  // The process groups over `comm` (parallel/topology.h), made once here for the config's
  // zero_optimization block; partitioned construction and the engine both use them.
  std::shared_ptr<const dist::Topology> topology;
  // Where the model trains (LaunchOptions::device resolved for this rank): its current device,
  // the device the communicator takes tensors on, where partitioned construction puts the shards;
  // initialize() moves the rest of the model and the batches there.
  c10::Device device = c10::Device(c10::kCPU);
  ProgramValues program;  // what the "auto" keys still pending resolve from in initialize
  // ZeRO stage 3: partitioned construction (core/zero/partitioned_init.h) laid out as the engine
  // will be (this rank, the world size, reduce_bucket_size, stage3_param_persistence_threshold,
  // the `freeze` globs); null at other stages. A model whose constructor hands its units to it
  // is never whole on any rank; initialize() gives it to the engine, which adopts the shards.
  std::shared_ptr<zero::PartitionedInit> partitioned;
};

Launch launch(const LaunchOptions& options);
// From the command line's --config and --set (core/config/cli_options.h).
Launch launch(const CliOptions& cli, const ProgramValues& program = {});

struct InitOptions {
  // The model's stage-3 units (submodule names gathered together, e.g. transformer blocks).
  std::vector<std::string> units = {};
  // Or by class: every submodule of these types is a unit too (zero::units_of_types, e.g.
  // {"GptBlock"}), after the named ones.
  std::vector<std::string> unit_types = {};
  // Whether `units` already follow zero_optimization.stage3_module_granularity_threshold (the
  // Python front door's, whose forward hooks make any module a unit). A C++ program's units are
  // where it calls zt::call_unit, so otherwise a threshold above 0 only warns.
  bool units_follow_granularity = false;
  // Whether the program planned the run's memory itself, with its activations, before building
  // the model (train/memory_check.h; train_gpt). Otherwise the plan of the model's parameters
  // and the engine's buffers, without activations, is logged and checked here.
  bool memory_planned = false;
  // The training data; null: no loader.
  std::shared_ptr<const data::TokenDataset> train_data = {};
  // How the program's batches differ from the data block (training is forced on).
  BatchStreamOptions data = {};
  // The model splits its sequence over the launch's sequence group (sequence_parallel_setup);
  // a config with sequence_parallel_size > 1 is refused for a model that does not.
  bool sequence_parallel = false;
  // The model splits its layers over the launch's tensor group (Launch::topology->tensor) and
  // names the split parameters in EngineOptions::tensor_split_params (tensor_split below); a
  // config with tensor_parallel.autotp_size > 1 is refused for a model that does not.
  bool tensor_parallel = false;
  // The same for expert_parallel.autoep_size > 1 (Launch::topology->expert): the model deals its
  // experts over the expert group and names them in tensor_split, or, dealt whole, in
  // expert_dealt (EngineOptions::dealt_params).
  bool expert_parallel = false;
  std::map<std::string, int64_t> tensor_split = {};
  std::set<std::string> expert_dealt = {};
  // The model was split by tensor_parallel.partition_config (the Python front door's); a config
  // that has one is refused for a model that splits its own way.
  bool partition_config_applied = false;
  // A schedule from outside the config, for a config without a scheduler block, as factors of
  // the optimizer's lr (its lr_at is the factor): the Hugging Face Trainer's own
  // (python/zerotorch/engine.py, TrainerSchedule), which DeepSpeed runs as a client scheduler
  // over its optimizer.
  std::shared_ptr<const optim::LrSchedule> lr_factor = {};
};

// What a sequence-parallel model is set with: the topology's sequence group (null without
// sequence parallelism) and the exchange's dtype (seq_parallel_communication_data_type, fp32 by
// default as in DeepSpeed).
struct SequenceParallelSetup {
  std::shared_ptr<dist::Communicator> group;
  at::ScalarType wire = at::kFloat;
};
SequenceParallelSetup sequence_parallel_setup(const Launch& launch);

// What the training loop uses.
struct Training {
  Config config;
  std::shared_ptr<dist::Communicator> comm;
  c10::Device device = c10::Device(c10::kCPU);  // the model's and the batches' (Launch::device)
  std::unique_ptr<Engine> engine;
  std::unique_ptr<BatchStream> loader;  // null without InitOptions::train_data
  std::vector<std::string> frozen;      // parameter names the config's `freeze` matched
  // The config's `tensorboard` / `csv_monitor` blocks (rank 0 writes; elsewhere an empty list).
  // The training loop writes its scalars (loss, lr, loss scale, grad norm, tokens/s, samples)
  // under DeepSpeed's names (train/monitor/monitor.h); TrainingRun (train/training_run.h) does
  // so every step.
  std::shared_ptr<Monitor> monitor;
  // The memory plan checked at start (train/memory_check.h): of the model's parameters and the
  // engine's buffers; empty where the program planned itself (InitOptions::memory_planned) or
  // memory_plan.enabled is false.
  plan::MemoryPlan memory_plan;

  // Another stream over `dataset` with this job's config and ranks (validation: training false).
  std::unique_ptr<BatchStream> make_loader(std::shared_ptr<const data::TokenDataset> dataset,
                                           BatchStreamOptions options) const;
};

Training initialize(Launch launch, std::shared_ptr<torch::nn::Module> model,
                    InitOptions options = {});
// launch() then initialize(), for a model whose shape does not depend on the config (its
// initial weights were drawn before the config's seed was applied).
Training initialize(std::shared_ptr<torch::nn::Module> model, const LaunchOptions& launch_options,
                    InitOptions options = {});

}  // namespace zt
