// zt-plan: each rank's memory plan of a run before it is launched (core/plan/memory_plan.h), and
// whether it fits this machine (train/memory_check.h).
//
//   zt-plan CONFIG [--world-size N] [--ranks-per-node R] [--set KEY=VALUE ...]
//                  [--device cpu|cuda|zttest] [--backend gloo|mpi|nccl]
//                  [--model gpt|llama] [--hf-dir DIR | --params N] [--vocab-size V]
//
// The model: train_gpt's GPT or, with --model llama, train_llama's LLaMA family (Llama, Qwen2,
// Mistral, Mixtral, Qwen2-MoE, Qwen3-MoE) from the config's `model` block (with --set model.*; a
// vocabulary of 0 there needs --vocab-size), or a Hugging Face directory (its config.json; its
// model_type picks the family), with the activations of one layer (of each kind) and of the root
// probed on --device (default cpu; a plan for a GPU made on a CPU uses the CPU's kernels, which
// the plan says); or --params N trainable parameters as one unit without activations. Under the
// config's sequence, tensor and expert splits the LLaMA plan is rank 0's, whose part is the
// largest where a tensor split is uneven. Prints the plan (device, host, pinned, NVMe per rank,
// with the parts at each peak) and exits 0 when it fits this machine's limits (memory_plan block:
// the limit keys, else MemAvailable shared by R ranks, the free space at the NVMe path; a CUDA
// device's free memory when --device is one), or prints the refusal line and exits 1.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <yaml-cpp/yaml.h>

#include <ATen/Parallel.h>

#include "base/env_vars.h"
#include "base/error.h"
#include "base/main_guard.h"
#include "core/config/cli_options.h"
#include "core/config/config.h"
#include "core/config/engine_config.h"
#include "examples/gpt/gpt_plan.h"
#include "examples/llama/llama_plan.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/hf_gpt2.h"
#include "models/llama/hf_llama.h"
#include "models/llama/llama_config.h"
#include "train/device.h"
#include "train/memory_check.h"

namespace po = boost::program_options;

namespace zt::examples {
namespace {

// "llama" when DIR/config.json's model_type is one of the LLaMA family's, else "gpt".
std::string family_of(const std::string& hf_dir) {
  const YAML::Node c = YAML::LoadFile(hf_dir + "/config.json");
  const std::string type = c.IsMap() && c["model_type"] ? c["model_type"].as<std::string>() : "";
  for (const char* t : {"llama", "qwen2", "mistral", "mixtral", "qwen2_moe", "qwen3_moe"}) {
    if (type == t) return "llama";
  }
  return "gpt";
}

int plan_main(const CliOptions& cli) {
  const std::string file = cli.has("file") ? cli.get<std::string>("file") : cli.config_path();
  ZT_CHECK(!file.empty(), "zt-plan needs a config FILE");
  const int world = cli.world_size();
  models::GptShape shape;
  bool from_params = false;
  int64_t params = 0;
  if (cli.has("params")) {
    const double n = cli.get<double>("params");
    ZT_CHECK(n >= 1 && n < 9e18 && n == static_cast<double>(static_cast<int64_t>(n)),
             "--params must be a whole number >= 1, got ", n);
    params = static_cast<int64_t>(n);
    from_params = true;
  }
  const std::string hf_dir = cli.has("hf-dir") ? cli.get<std::string>("hf-dir") : "";
  std::string family = cli.get<std::string>("model");
  if (family.empty()) family = hf_dir.empty() ? "gpt" : family_of(hf_dir);
  ZT_CHECK(family == "gpt" || family == "llama", "--model must be gpt or llama, got ", family);
  const bool llama = family == "llama";
  models::LlamaShape llama_shape;
  ProgramValues program = cli.program_values();
  program.hidden_size_key = llama ? "model.hidden_size" : "model.d_model";
  if (!hf_dir.empty()) {
    if (llama) {
      llama_shape = models::llama_shape_from_hf_config(hf_dir + "/config.json");
      program.hidden_size = llama_shape.hidden_size;
    } else {
      shape = models::gpt_shape_from_hf_config(hf_dir + "/config.json");
      program.hidden_size = shape.d_model;
    }
    program.hidden_size_key.clear();
  }
  ConfigReport report = check_config_file(file, cli.overrides(), world, program);
  for (const auto& w : report.warnings)
    std::fprintf(stderr, "%s: warning: %s\n", file.c_str(), w.c_str());
  if (!report.errors.empty()) {
    for (const auto& e : report.errors) std::printf("%s: error: %s\n", file.c_str(), e.c_str());
    return 1;
  }
  const Config& config = *report.config;
  dist::Env env;
  env.world_size = world;
  env.local_world_size =
      cli.get<int>("ranks-per-node") > 0 ? cli.get<int>("ranks-per-node") : world;
  const c10::Device device = resolve_device(cli.device().empty() ? "cpu" : cli.device(), env);
  // The probes run with the intra-op threads a rank gets (ztrun and torchrun set OMP_NUM_THREADS
  // to the cores over the node's ranks): CPU kernels' buffers follow the thread count.
  if (::zt::env::get(env::kOmpNumThreads) == nullptr) {
    at::set_num_threads(std::max(1, at::get_num_threads() / env.local_world_size));
  }
  // The communicator a launch would make (dist::resolve_backend): the config's, or for `auto`
  // NCCL on CUDA, else what ztrun starts: MPI for several ranks on one node (its auto transport
  // where OpenMPI is installed, as scripts/setup.sh installs it), gloo across nodes and for one
  // process started by itself.
  std::string backend = cli.get<std::string>("backend");
  if (backend.empty() && config.communication.backend != CommBackend::kAuto) {
    backend = to_string(config.communication.backend);
  }
  if (backend.empty()) {
    backend = device.is_cuda()                             ? "nccl"
              : world > 1 && world <= env.local_world_size ? "mpi"
                                                           : "gloo";
  }
  plan::MemoryPlan p;
  train::Replan replan;
  bool checkpointing = false;
  if (from_params) {
    plan::ModelMemory mm;
    mm.units.push_back({"model", {{"parameters", params}}, 0, {}});
    replan = [=](const Config& c, bool) {
      return plan::plan_memory(c, world, mm, device, backend);
    };
  } else if (llama) {
    if (hf_dir.empty()) {
      llama_shape = models::llama_shape_from_config(config.program_block("model"),
                                                    cli.get<int64_t>("vocab-size"));
      ZT_CHECK(llama_shape.vocab_size > 0,
               "model.vocab_size is 0 (the shard's vocabulary): give --vocab-size");
    } else {
      llama_shape = models::llama_shape_over_pretrained(config.program_block("model"), llama_shape,
                                                        hf_dir + "/config.json");
    }
    // Rank 0 of each split group (dist::split_sizes deals the first ranks one more).
    models::LlamaRankSplit ranks;
    ranks.sequence = config.sequence_parallel_size;
    ranks.wire = sequence_parallel_dtype(config);
    ranks.tensor = config.tensor_parallel.size();
    ranks.expert = config.expert_parallel.size();
    auto planner = std::make_shared<LlamaPlanner>(llama_shape, ranks, device);
    checkpointing = planner->checkpointing();
    replan = [=](const Config& c, bool ckpt) { return (*planner)(c, world, backend, ckpt); };
  } else {
    if (hf_dir.empty()) {
      const int64_t vocab = cli.get<int64_t>("vocab-size");
      shape = models::gpt_shape_from_config(config.program_block("model"), vocab);
      ZT_CHECK(shape.vocab_size > 0,
               "model.vocab_size is 0 (the shard's vocabulary): give --vocab-size");
    }
    auto planner = std::make_shared<GptPlanner>(shape, device);
    checkpointing = planner->checkpointing();
    replan = [=](const Config& c, bool ckpt) { return (*planner)(c, world, backend, ckpt); };
  }
  p = replan(config, false);
  std::printf("memory plan per rank (%s, %d rank(s), %s, %s):\n", file.c_str(), world,
              device.str().c_str(), backend.c_str());
  for (const std::string& line : p.lines()) std::printf("  %s\n", line.c_str());
  const std::string refusal = train::memory_refusal(p, train::memory_limits(config, device, env),
                                                    config, checkpointing, replan);
  if (!refusal.empty()) {
    std::printf("%s\n", refusal.c_str());
    return 1;
  }
  std::printf("fits this machine\n");
  return 0;
}

}  // namespace
}  // namespace zt::examples

int main(int argc, char** argv) {
  return zt::run_main("zt-plan", [&] {
    zt::CliOptionsSpec spec;
    spec.config_required = false;
    spec.world_size = true;
    zt::CliOptions cli("zt-plan", "Prints each rank's memory plan of a run and whether it fits.",
                       spec);
    cli.add()("file", po::value<std::string>(), "config file (or --config)")(
        "model", po::value<std::string>()->default_value(""),
        "gpt (train_gpt's, the default) or llama (train_llama's LLaMA family)")(
        "hf-dir", po::value<std::string>(),
        "a Hugging Face GPT-2 or LLaMA-family directory (config.json)")(
        "params", po::value<double>(), "or N trainable parameters as one unit, no activations")(
        "vocab-size", po::value<int64_t>()->default_value(0),
        "the model's vocabulary when model.vocab_size is 0")(
        "ranks-per-node", po::value<int>()->default_value(0),
        "ranks sharing this machine's host memory and disk (default: the world size)")(
        "backend", po::value<std::string>()->default_value(""),
        "the communicator: gloo, mpi or nccl (default: the config's; for auto nccl on CUDA, "
        "else mpi for several ranks on one node as ztrun starts them, else gloo)");
    cli.add_positional("file", 1);
    if (!cli.parse(argc, argv)) return 0;
    return zt::examples::plan_main(cli);
  });
}
