// zt-config: checks a training config before a job is queued.
//
//   zt-config validate FILE [--world-size N] [--set KEY=VALUE ...] [--hidden-size H]
//                           [Trainer flags: --per-device-train-batch-size 8 --learning-rate ...]
//                           [--hidden-size-key model.d_model] [--params N]
//
// Prints the resolved config as JSON on stdout and exits 0, or every error, one per line
// (`FILE: error: <key path>: <problem>`), on stdout and exits 1. Warnings (DeepSpeed keys
// zerotorch ignores) and one line per "auto" value (`FILE: auto: <key> = <value> (<why>)`, as
// the Hugging Face Trainer would fill it, from the Trainer flags and their defaults) go to
// stderr either way. A bad command line exits 1 with one line.
#include <cstdio>
#include <iostream>
#include <string>

#include "base/error.h"
#include "base/main_guard.h"
#include "core/config/cli_options.h"
#include "core/config/config.h"
#include "core/config/memory_estimate.h"

namespace po = boost::program_options;

namespace {

// The values a training program would supply for "auto" keys: the Trainer's flags and
// defaults, and the model's hidden size when given.
zt::ProgramValues program_values(const zt::CliOptions& cli) {
  zt::ProgramValues p = cli.program_values();
  if (cli.has("hidden-size")) {
    p.hidden_size = cli.get<int64_t>("hidden-size");
    p.origin["hidden_size"] = "--hidden-size";
  }
  if (cli.has("hidden-size-key")) {
    p.hidden_size_key = cli.get<std::string>("hidden-size-key");
    p.origin["hidden_size"] = "--hidden-size-key " + p.hidden_size_key;
  }
  return p;
}

int validate(const zt::CliOptions& cli, const std::string& file) {
  zt::ConfigReport report =
      zt::check_config_file(file, cli.overrides(), cli.world_size(), program_values(cli));
  for (const auto& w : report.warnings)
    std::fprintf(stderr, "%s: warning: %s\n", file.c_str(), w.c_str());
  for (const auto& a : report.autos)
    std::fprintf(stderr, "%s: auto: %s\n", file.c_str(), a.c_str());
  if (!report.errors.empty()) {
    for (const auto& e : report.errors) std::printf("%s: error: %s\n", file.c_str(), e.c_str());
    return 1;
  }
  if (cli.has("params")) {
    // A double, so 2e9 reads as users write it; a fraction is a mistake.
    const double params = cli.get<double>("params");
    ZT_CHECK(
        params >= 1 && params < 9e18 && params == static_cast<double>(static_cast<int64_t>(params)),
        "--params must be a whole number >= 1, got ", params);
    for (const auto& line :
         zt::memory_estimate_lines(*report.config, static_cast<int64_t>(params), cli.world_size()))
      std::fprintf(stderr, "%s: memory: %s\n", file.c_str(), line.c_str());
  }
  std::printf("%s\n", report.config->to_json().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_main("zt-config", [&] {
    zt::CliOptionsSpec spec;
    spec.config_required = false;
    spec.world_size = true;
    spec.device = false;  // it trains nothing
    zt::CliOptions cli(
        "zt-config",
        "COMMAND is validate: print FILE resolved as JSON (exit 0) or every error (exit 1)", spec);
    cli.add()("command", po::value<std::string>(), "validate")("file", po::value<std::string>(),
                                                               "config file (or --config)")(
        "hidden-size", po::value<int64_t>(), "model hidden size for \"auto\" bucket sizes")(
        "hidden-size-key", po::value<std::string>(),
        "or the program block key holding it (train_gpt: model.d_model)")(
        "params", po::value<double>(),
        "trainable parameter count: print model-state bytes per rank (device, host, NVMe) for "
        "each optimizer offload choice");
    cli.add_positional("command", 1);
    cli.add_positional("file", 1);
    if (!cli.parse(argc, argv)) return 0;
    ZT_CHECK(cli.has("command"), "missing command (see zt-config --help)");
    const std::string command = cli.get<std::string>("command");
    ZT_CHECK(command == "validate", "unknown command '", command, "'; expected validate");
    std::string file = cli.has("file") ? cli.get<std::string>("file") : cli.config_path();
    ZT_CHECK(!file.empty(), "validate needs a config FILE");
    return validate(cli, file);
  });
}
