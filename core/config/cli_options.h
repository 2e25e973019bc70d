#pragma once
// zt::CliOptions: the command line every zerotorch example and tool shares, on
// Boost.Program_options:
//   --config FILE     the training config (JSON or YAML)
//   --set KEY=VALUE   a config override, repeatable, applied in order (zero_optimization.stage=3)
//   --peak-tflops X   the device's peak for MFU: --set flops_profiler.peak_tflops=X after the rest
//   --world-size N    only where enabled: the world size to resolve the batch triple for
//   --device D        where the program trains: auto (default: this rank's GPU where one is
//                     visible, else the CPU), cpu, cuda, cuda:N, zttest, zttest:N (train/device.h)
//   --help            usage on stdout; parse() then returns false and the program exits 0
// and, with --config, the Hugging Face Trainer's arguments that "auto" config values stand for,
// with the Trainer's names and defaults (HfTrainerDeepSpeedConfig fills "auto" from them):
//   --per-device-train-batch-size 8   train_micro_batch_size_per_gpu (and train_batch_size)
//   --gradient-accumulation-steps 1   gradient_accumulation_steps
//   --learning-rate 5e-5              optimizer lr, scheduler warmup_max_lr
//   --weight-decay 0, --adam-beta1 0.9, --adam-beta2 0.999, --adam-epsilon 1e-8
//   --max-grad-norm 1.0               gradient_clipping
//   --warmup-steps 0, --warmup-ratio 0, --max-steps -1 (unknown)   scheduler step counts
//   --fp16, --bf16                    fp16.enabled / bf16.enabled (false unless given)
// They only fill keys written "auto"; a key with a value keeps it.
// plus the program's own options, registered before parse():
//
//   zt::CliOptions cli("gpt_train", "Trains a small GPT with ZeRO.");
//   cli.add()("steps", po::value<int>()->default_value(100), "training steps");
//   if (!cli.parse(argc, argv)) return 0;
//   zt::Config config = cli.load_config(env.world_size, {});
//   int steps = cli.get<int>("steps");
//
// A bad command line (unknown option, missing value, bad number, missing --config when
// required) throws zt::Error with one line naming the option; zt::run_main prints it.

#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/config/config.h"

namespace zt {

struct CliOptionsSpec {
  bool config = true;           // offer --config and --set
  bool config_required = true;  // parse() fails without --config
  bool world_size = false;      // offer --world-size (tools that run outside a launch)
  int default_world_size = 1;
  bool trainer_args = true;  // with config: the Trainer's flags above
  bool device = true;        // with config: --device, where the program trains (train/device.h)
};

class CliOptions {
 public:
  CliOptions(std::string program, std::string summary, CliOptionsSpec spec = {});

  // Registers program options: cli.add()("name,n", po::value<T>(), "help").
  boost::program_options::options_description_easy_init add();
  // Options parsed but left out of --help: the slots of positional arguments.
  boost::program_options::options_description_easy_init add_hidden();
  // Names a positional argument (`zt-config validate FILE`): max_count -1 = any number. The
  // option must also be registered with add() or add_hidden(); usage shows it upper-cased.
  void add_positional(const char* name, int max_count);

  // Parses argv. Returns false when --help was given (usage already printed to stdout).
  bool parse(int argc, const char* const argv[]);

  const std::string& config_path() const { return config_path_; }
  const std::vector<std::string>& overrides() const { return overrides_; }
  int world_size() const { return world_size_; }
  // --device as given ("" when not: auto).
  const std::string& device() const { return device_; }
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  // The value of a registered option that was given or has a default.
  template <typename T>
  T get(const std::string& name) const {
    ZT_CHECK(has(name), program_, ": option --", name, " has no value");
    return values_[name].as<T>();
  }
  const boost::program_options::variables_map& values() const { return values_; }
  // Usage text: "Usage: <program> [options]", the summary, then the options.
  std::string help() const;

  // The Trainer's values from the command line (defaults included), each with its origin
  // ("--learning-rate 5e-05, its default"). Empty without trainer_args.
  ProgramValues program_values() const;
  // `program`'s values, with the Trainer flags' values where the program gives none.
  ProgramValues merged_program_values(const ProgramValues& program) const;

  // zt::load_config(config_path(), overrides(), world_size, values): `program`'s fields where
  // set, else program_values()'s.
  Config load_config(int world_size, const ProgramValues& program = {}) const;

 private:
  std::string program_;
  std::string summary_;
  CliOptionsSpec spec_;
  boost::program_options::options_description options_;
  boost::program_options::options_description hidden_;
  boost::program_options::positional_options_description positional_;
  std::vector<std::string> positional_names_;
  boost::program_options::variables_map values_;
  std::string config_path_;
  std::vector<std::string> overrides_;
  int world_size_ = 1;
  std::string device_;
};

}  // namespace zt
