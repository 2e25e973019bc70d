// zt-plan: each rank's memory plan of a run before it is launched (core/plan/memory_plan.h), and
// whether it fits this machine (train/memory_check.h).
//
//   zt-plan CONFIG [--world-size N] [--ranks-per-node R] [--set KEY=VALUE ...]
//                  [--device cpu|cuda|zttest] [--backend gloo|mpi|nccl]
//                  [--hf-dir DIR | --params N] [--vocab-size V]
//
// The model: train_gpt's GPT from the config's `model` block (with --set model.*; a vocabulary of
// 0 there needs --vocab-size), or a Hugging Face GPT-2 directory (its config.json), with the
// activations of one block and of the root probed on --device (default cpu; a plan for a GPU made
// on a CPU uses the CPU's kernels, which the plan says); or --params N trainable parameters as
// one unit without activations. Prints the plan (device, host, pinned, NVMe per rank, with the
// parts at each peak) and exits 0 when it fits this machine's limits (memory_plan block: the
// limit keys, else MemAvailable shared by R ranks, the free space at the NVMe path; a CUDA
// device's free memory when --device is one), or prints the refusal line and exits 1.
#include <cstdio>
#include <string>

#include "base/error.h"
#include "base/main_guard.h"
#include "core/config/cli_options.h"
#include "core/config/config.h"
#include "examples/gpt/gpt_plan.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/hf_gpt2.h"
#include "train/device.h"
#include "train/memory_check.h"

namespace po = boost::program_options;

namespace zt::examples {
namespace {

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
  ProgramValues program = cli.program_values();
  program.hidden_size_key = "model.d_model";
  if (cli.has("hf-dir")) {
    shape = models::gpt_shape_from_hf_config(cli.get<std::string>("hf-dir") + "/config.json");
    program.hidden_size = shape.d_model;
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
  std::string backend = cli.get<std::string>("backend");
  if (backend.empty()) backend = device.is_cuda() ? "nccl" : "gloo";
  plan::MemoryPlan p;
  train::Replan replan;
  bool checkpointing = false;
  if (from_params) {
    plan::ModelMemory mm;
    mm.units.push_back({"model", {{"parameters", params}}, 0, {}});
    replan = [=](const Config& c, bool) {
      return plan::plan_memory(c, world, mm, device, backend);
    };
  } else {
    if (!cli.has("hf-dir")) {
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
  std::printf("memory plan per rank (%s, %d rank(s), %s):\n", file.c_str(), world,
              device.str().c_str());
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
        "hf-dir", po::value<std::string>(), "a Hugging Face GPT-2 directory (config.json)")(
        "params", po::value<double>(), "or N trainable parameters as one unit, no activations")(
        "vocab-size", po::value<int64_t>()->default_value(0),
        "the GPT's vocabulary when model.vocab_size is 0")(
        "ranks-per-node", po::value<int>()->default_value(0),
        "ranks sharing this machine's host memory and disk (default: the world size)")(
        "backend", po::value<std::string>()->default_value(""),
        "the communicator: gloo, mpi or nccl (default: nccl on CUDA, else gloo)");
    cli.add_positional("file", 1);
    if (!cli.parse(argc, argv)) return 0;
    return zt::examples::plan_main(cli);
  });
}
