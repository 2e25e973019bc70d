#include "train/initialize.h"

#include <algorithm>

#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/torch.h>

#include "base/error.h"
#include "base/logging.h"
#include "core/config/engine_config.h"
#include "core/zero/units.h"
#include "parallel/dist.h"
#include "train/device.h"
#include "train/freeze.h"
#include "train/memory_check.h"

namespace zt {

namespace {

// The layout the engine will use, known before the model exists: the config's bucket keys, with
// "auto" resolved from the program's values as initialize() will resolve them.
std::shared_ptr<zero::PartitionedInit> partitioned_init(const Launch& l) {
  if (l.config.zero_optimization.stage != 3) return nullptr;
  // Under tensor or expert parallelism the model is built whole and then split
  // (set_tensor_parallel and set_expert_parallel cut whole weights); building slices partitioned
  // is not done.
  if (l.config.tensor_parallel.size() > 1 || l.config.expert_parallel.size() > 1) return nullptr;
  Config resolved = l.config;
  if (!resolved.pending_autos.empty()) resolve_program_autos(resolved, l.program);
  const ZeroConfig& z = resolved.zero_optimization;
  // bf16 masters are taken from the bf16 shards: construction keeps those alone.
  const bool bf16_masters = resolved.bf16.enabled && resolved.bf16.bf16_master_weights_and_grads;
  // A rank builds its shard of the group the engine shards the state over (with hybrid
  // sharding, its group of mics_shard_size consecutive ranks).
  return std::make_shared<zero::PartitionedInit>(zero::PartitionOptions{
      .rank = l.topology->shard->rank(),
      .world = l.topology->shard->size(),
      .reduce_bucket_size = z.reduce_bucket_size,
      .persistence_threshold = z.stage3_param_persistence_threshold,
      .frozen = l.config.freeze,
      .device = l.device,
      .dtype = bf16_masters ? std::optional<at::ScalarType>(at::kBFloat16) : std::nullopt});
}

// InitOptions::lr_factor times the optimizer's lr.
class ScaledSchedule : public optim::LrSchedule {
 public:
  ScaledSchedule(std::shared_ptr<const optim::LrSchedule> factor, double lr)
      : factor_(std::move(factor)), lr_(lr) {}
  double lr_at(int64_t step) const override { return lr_ * factor_->lr_at(step); }
  std::string name() const override { return factor_->name(); }

 private:
  std::shared_ptr<const optim::LrSchedule> factor_;
  double lr_;
};

}  // namespace

Launch launch(const LaunchOptions& options) {
  Launch l;
  l.env = dist::Env::discover();
  ZT_CHECK(options.config_path.empty() != options.config_text.empty(),
           "zt::launch: give the config as a path or as text, one of the two");
  l.config =
      options.config_path.empty()
          ? load_config_text(options.config_text, "(dict)", options.overrides, l.env.world_size,
                             options.program)
          : load_config(options.config_path, options.overrides, l.env.world_size, options.program);
  l.device = resolve_device(options.device, l.env);
  dist::CommOptions comm_options = comm_options_from_config(l.config);
  comm_options.device = l.device;
  l.comm = dist::create_communicator(comm_options, l.env);
  check_one_rank_per_device(*l.comm, l.device);
  if (!l.device.is_cpu()) c10::impl::VirtualGuardImpl(l.device.type()).setDevice(l.device);
  if (l.env.rank == 0 || l.env.world_size == 1) ZT_LOG_INFO("device: ", l.device);
  l.program = options.program;
  EngineOptions switches;
  read_environment_switches(switches);
  l.topology = dist::make_topology(
      l.comm,
      topology_options(l.config.zero_optimization, switches.hierarchical_reduce,
                       l.config.sequence_parallel_size, l.config.tensor_parallel.size(),
                       l.config.expert_parallel.size()),
      l.env);
  l.partitioned = partitioned_init(l);
  torch::manual_seed(static_cast<uint64_t>(l.config.seed));
  return l;
}

Launch launch(const CliOptions& cli, const ProgramValues& program) {
  ZT_CHECK(!cli.config_path().empty(), "no --config given");
  // The Trainer's flags (--per-device-train-batch-size, --learning-rate, ...) fill what the
  // program leaves open, as "auto" is resolved by the Hugging Face Trainer.
  return launch(LaunchOptions{cli.config_path(), cli.overrides(),
                              cli.merged_program_values(program), cli.device()});
}

Training initialize(Launch launch, std::shared_ptr<torch::nn::Module> model, InitOptions options) {
  ZT_CHECK(model != nullptr, "zt::initialize: no model");
  Training t;
  t.config = std::move(launch.config);
  t.comm = std::move(launch.comm);
  t.device = launch.device;
  // What construction left on the host (everything, unless it was partitioned onto the device:
  // then module buffers and parameters kept whole) goes to the device before the engine lays
  // the parameters out; a parameter already there stays as it is.
  if (!t.device.is_cpu()) model->to(t.device);
  t.frozen = freeze_parameters(*model, t.config.freeze);
  if (!t.frozen.empty()) {
    std::string names;
    for (const auto& n : t.frozen) names += (names.empty() ? "" : ", ") + n;
    ZT_LOG_INFO("frozen (config `freeze`): ", names);
  }
  // "auto" keys that needed the program's model or step count (bucket sizes from the hidden
  // size, scheduler steps); engine_options_from_config names any still unresolved.
  if (!t.config.pending_autos.empty()) {
    for (const auto& note : resolve_program_autos(t.config, launch.program)) {
      ZT_LOG_INFO("config: ", note);
    }
  }
  if (launch.partitioned && !launch.partitioned->empty()) {
    ZT_LOG_INFO("model built partitioned: ", launch.partitioned->resident_bytes(),
                " B of shards on this rank, largest unit ",
                launch.partitioned->largest_unit_bytes(), " B");
  }
  ZT_CHECK(t.config.sequence_parallel_size <= 1 || options.sequence_parallel,
           "sequence_parallel_size ", t.config.sequence_parallel_size,
           ": this program's model has no sequence-parallel attention (the LLaMA family's has: "
           "train_llama); set it to 1");
  ZT_CHECK(t.config.tensor_parallel.size() <= 1 || options.tensor_parallel,
           "tensor_parallel.autotp_size ", t.config.tensor_parallel.autotp_size,
           ": this program's model does not split its layers (the LLaMA family's does: "
           "train_llama); set it to 0 or 1");
  ZT_CHECK(t.config.expert_parallel.size() <= 1 || options.expert_parallel,
           "expert_parallel.autoep_size ", t.config.expert_parallel.autoep_size,
           ": this program's model does not deal its experts over expert-parallel ranks (the "
           "C++ Mixtral, Qwen2-MoE and Qwen3-MoE do: train_llama); set it to 1");
  ZT_CHECK(t.config.tensor_parallel.partition_config.empty() || options.partition_config_applied,
           "tensor_parallel.partition_config: this program's model splits as DeepSpeed's llama "
           "preset (q/k/v/gate/up by output features, o/down by input features); the patterns "
           "act on Python models (zerotorch.initialize); remove it");
  const int64_t granularity = t.config.zero_optimization.stage3_module_granularity_threshold;
  if (granularity > 0 && !options.units_follow_granularity && t.comm->rank() == 0) {
    ZT_LOG_WARN("config: zero_optimization.stage3_module_granularity_threshold ", granularity,
                ": no effect in a C++ program, whose stage-3 units are where it calls "
                "zt::call_unit (the Python front door applies it)");
  }
  for (auto& name : zero::units_of_types(*model, options.unit_types)) {
    if (std::find(options.units.begin(), options.units.end(), name) == options.units.end()) {
      options.units.push_back(std::move(name));
    }
  }
  if (!options.memory_planned && t.config.memory_plan.enabled) {
    // The model's parameters and the engine's buffers; the program's activations are unknown.
    std::set<std::string> split(options.expert_dealt);
    for (const auto& kv : options.tensor_split) split.insert(kv.first);
    const plan::ModelMemory mm = train::model_memory(*model, options.units, split);
    if (!mm.units.empty() && !mm.units.back().params.empty()) {
      const int world = t.comm->size();
      const std::string backend = t.comm->backend();
      const c10::Device device = t.device;
      const auto replan = [&](const Config& c, bool) {
        return plan::plan_memory(c, world, mm, device, backend);
      };
      t.memory_plan = train::plan_and_check(t.config, t.device, launch.env, true, replan);
    }
  }
  EngineOptions engine_options = engine_options_from_config(t.config, std::move(options.units));
  engine_options.tensor_split_params = std::move(options.tensor_split);
  engine_options.dealt_params = std::move(options.expert_dealt);
  if (options.lr_factor) {
    ZT_CHECK(!engine_options.lr_schedule, "the config's scheduler block (",
             engine_options.lr_schedule ? engine_options.lr_schedule->name() : "",
             ") and a program's schedule (", options.lr_factor->name(), ") both given");
    engine_options.lr_schedule =
        std::make_shared<ScaledSchedule>(std::move(options.lr_factor), engine_options.hyper.lr);
  }
  t.engine = std::make_unique<Engine>(std::move(model), std::move(engine_options), t.comm,
                                      std::move(launch.partitioned), std::move(launch.topology));
  t.monitor = make_monitor(t.config, t.comm->rank());
  if (options.train_data) {
    options.data.training = true;
    t.loader = t.make_loader(std::move(options.train_data), options.data);
  }
  return t;
}

SequenceParallelSetup sequence_parallel_setup(const Launch& launch) {
  return {launch.topology->sequence, sequence_parallel_dtype(launch.config)};
}

Training initialize(std::shared_ptr<torch::nn::Module> model, const LaunchOptions& launch_options,
                    InitOptions options) {
  return initialize(launch(launch_options), std::move(model), std::move(options));
}

std::unique_ptr<BatchStream> Training::make_loader(
    std::shared_ptr<const data::TokenDataset> dataset, BatchStreamOptions options) const {
  if (!options.device) options.device = device;
  return std::make_unique<BatchStream>(std::move(dataset), config, *comm, options);
}

}  // namespace zt
