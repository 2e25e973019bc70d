#include "core/config/cli_options.h"

#include <cctype>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include "base/error.h"

namespace zt {

namespace po = boost::program_options;

CliOptions::CliOptions(std::string program, std::string summary, CliOptionsSpec spec)
    : program_(std::move(program)), summary_(std::move(summary)), spec_(spec), options_("Options") {
  options_.add_options()("help,h", "print this help and exit");
  if (spec_.config) {
    options_.add_options()("config,c", po::value<std::string>()->value_name("FILE"),
                           "training config, JSON or YAML (DeepSpeed keys)")(
        "set", po::value<std::vector<std::string>>()->composing()->value_name("KEY=VALUE"),
        "override a config key, repeatable (e.g. --set zero_optimization.stage=3)")(
        "peak-tflops", po::value<double>()->value_name("TFLOPS"),
        "the device's peak TFLOP/s, for the MFU flops_profiler reports (sets "
        "flops_profiler.peak_tflops; needed where the device is not in its table, e.g. a CPU)");
  }
  if (spec_.config && spec_.device) {
    options_.add_options()("device", po::value<std::string>()->value_name("DEVICE"),
                           "where to train: auto (this rank's GPU if any, else cpu), cpu, cuda, "
                           "cuda:N, zttest or zttest:N (the host-backed test device)");
  }
  if (spec_.config && spec_.trainer_args) {
    po::options_description trainer(
        "Values for \"auto\" config keys (the Hugging Face Trainer's arguments and defaults)");
    trainer.add_options()("per-device-train-batch-size",
                          po::value<int64_t>()->default_value(8)->value_name("N"),
                          "train_micro_batch_size_per_gpu")(
        "gradient-accumulation-steps", po::value<int64_t>()->default_value(1)->value_name("N"),
        "gradient_accumulation_steps")("learning-rate",
                                       po::value<double>()->default_value(5e-5, "5e-05"),
                                       "optimizer lr, scheduler warmup_max_lr")(
        "weight-decay", po::value<double>()->default_value(0.0, "0"), "optimizer weight_decay")(
        "adam-beta1", po::value<double>()->default_value(0.9, "0.9"), "optimizer betas[0]")(
        "adam-beta2", po::value<double>()->default_value(0.999, "0.999"), "optimizer betas[1]")(
        "adam-epsilon", po::value<double>()->default_value(1e-8, "1e-08"), "optimizer eps")(
        "max-grad-norm", po::value<double>()->default_value(1.0, "1"), "gradient_clipping")(
        "warmup-steps", po::value<int64_t>()->default_value(0), "scheduler warmup_num_steps")(
        "warmup-ratio", po::value<double>()->default_value(0.0, "0"),
        "warmup_num_steps = ceil(ratio * total) when --warmup-steps is 0")(
        "max-steps", po::value<int64_t>()->default_value(-1),
        "scheduler total_num_steps (-1: the program's own count)")(
        "fp16", po::bool_switch(), "fp16.enabled")("bf16", po::bool_switch(), "bf16.enabled");
    options_.add(trainer);
  }
  if (spec_.world_size) {
    options_.add_options()(
        "world-size", po::value<int>()->default_value(spec_.default_world_size)->value_name("N"),
        "world size the batch sizes are resolved for");
  }
}

po::options_description_easy_init CliOptions::add() {
  return options_.add_options();
}

po::options_description_easy_init CliOptions::add_hidden() {
  return hidden_.add_options();
}

void CliOptions::add_positional(const char* name, int max_count) {
  positional_.add(name, max_count);
  positional_names_.emplace_back(name);
}

bool CliOptions::parse(int argc, const char* const argv[]) {
  try {
    po::options_description all;
    all.add(options_).add(hidden_);
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional_).run(),
              values_);
    if (values_.count("help")) {
      std::cout << help();
      return false;
    }
    po::notify(values_);
  } catch (const po::error& e) {
    // Boost's messages already name the option ("the argument ('x') for option '--world-size'
    // is invalid"); positional overflow reads as "too many positional options".
    ZT_THROW(e.what(), " (see ", program_, " --help)");
  }
  if (spec_.config) {
    if (values_.count("config")) config_path_ = values_["config"].as<std::string>();
    if (values_.count("set")) overrides_ = values_["set"].as<std::vector<std::string>>();
    if (values_.count("peak-tflops")) {
      overrides_.push_back(
          detail::str("flops_profiler.peak_tflops=", values_["peak-tflops"].as<double>()));
    }
    if (spec_.device && values_.count("device")) device_ = values_["device"].as<std::string>();
    ZT_CHECK(!spec_.config_required || !config_path_.empty(), "--config FILE is required (see ",
             program_, " --help)");
  }
  if (spec_.world_size) {
    world_size_ = values_["world-size"].as<int>();
    ZT_CHECK(world_size_ >= 1, "--world-size must be >= 1, got ", world_size_);
  }
  return true;
}

std::string CliOptions::help() const {
  std::ostringstream os;
  os << "Usage: " << program_;
  for (std::string name : positional_names_) {
    for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    os << " " << name;
  }
  os << " [options]\n";
  if (!summary_.empty()) os << summary_ << "\n";
  os << "\n" << options_;
  return os.str();
}

namespace {

// "--name value" plus ", its default" when the flag was not given.
template <typename T>
std::string origin(const po::variables_map& vm, const char* name, const T& value) {
  std::ostringstream os;
  os << "--" << name << " " << value;
  if (vm[name].defaulted()) os << ", the Trainer's default";
  return os.str();
}

template <typename T>
void fill(std::optional<T>& into, std::map<std::string, std::string>& origins, const char* field,
          const std::optional<T>& from, const std::map<std::string, std::string>& from_origins) {
  if (into || !from) return;
  into = from;
  auto it = from_origins.find(field);
  if (it != from_origins.end()) origins[field] = it->second;
}

}  // namespace

ProgramValues CliOptions::program_values() const {
  ProgramValues p;
  if (!spec_.config || !spec_.trainer_args || values_.empty()) return p;
  const po::variables_map& vm = values_;
  auto i64 = [&](const char* name) { return vm[name].as<int64_t>(); };
  auto dbl = [&](const char* name) { return vm[name].as<double>(); };
  p.micro_batch_size = i64("per-device-train-batch-size");
  p.origin["micro_batch_size"] = origin(vm, "per-device-train-batch-size", *p.micro_batch_size);
  p.gradient_accumulation_steps = i64("gradient-accumulation-steps");
  p.origin["gradient_accumulation_steps"] =
      origin(vm, "gradient-accumulation-steps", *p.gradient_accumulation_steps);
  p.lr = dbl("learning-rate");
  p.origin["lr"] = origin(vm, "learning-rate", *p.lr);
  p.weight_decay = dbl("weight-decay");
  p.origin["weight_decay"] = origin(vm, "weight-decay", *p.weight_decay);
  p.betas = std::vector<double>{dbl("adam-beta1"), dbl("adam-beta2")};
  p.origin["betas"] =
      origin(vm, "adam-beta1", (*p.betas)[0]) + " and " + origin(vm, "adam-beta2", (*p.betas)[1]);
  p.eps = dbl("adam-epsilon");
  p.origin["eps"] = origin(vm, "adam-epsilon", *p.eps);
  p.gradient_clipping = dbl("max-grad-norm");
  p.origin["gradient_clipping"] = origin(vm, "max-grad-norm", *p.gradient_clipping);
  p.warmup_steps = i64("warmup-steps");
  p.origin["warmup_steps"] = origin(vm, "warmup-steps", *p.warmup_steps);
  p.warmup_ratio = dbl("warmup-ratio");
  p.origin["warmup_ratio"] = origin(vm, "warmup-ratio", *p.warmup_ratio);
  if (i64("max-steps") > 0) {
    p.total_steps = i64("max-steps");
    p.origin["total_steps"] = origin(vm, "max-steps", *p.total_steps);
  }
  p.fp16 = vm["fp16"].as<bool>();
  p.origin["fp16"] = *p.fp16 ? "--fp16" : "no --fp16 (the Trainer's default false)";
  p.bf16 = vm["bf16"].as<bool>();
  p.origin["bf16"] = *p.bf16 ? "--bf16" : "no --bf16 (the Trainer's default false)";
  return p;
}

ProgramValues CliOptions::merged_program_values(const ProgramValues& program) const {
  ProgramValues merged = program;
  const ProgramValues cli = program_values();
  std::map<std::string, std::string>& o = merged.origin;
  fill(merged.micro_batch_size, o, "micro_batch_size", cli.micro_batch_size, cli.origin);
  fill(merged.gradient_accumulation_steps, o, "gradient_accumulation_steps",
       cli.gradient_accumulation_steps, cli.origin);
  fill(merged.gradient_clipping, o, "gradient_clipping", cli.gradient_clipping, cli.origin);
  fill(merged.fp16, o, "fp16", cli.fp16, cli.origin);
  fill(merged.bf16, o, "bf16", cli.bf16, cli.origin);
  fill(merged.lr, o, "lr", cli.lr, cli.origin);
  fill(merged.betas, o, "betas", cli.betas, cli.origin);
  fill(merged.eps, o, "eps", cli.eps, cli.origin);
  fill(merged.weight_decay, o, "weight_decay", cli.weight_decay, cli.origin);
  fill(merged.warmup_steps, o, "warmup_steps", cli.warmup_steps, cli.origin);
  fill(merged.warmup_ratio, o, "warmup_ratio", cli.warmup_ratio, cli.origin);
  fill(merged.total_steps, o, "total_steps", cli.total_steps, cli.origin);
  return merged;
}

Config CliOptions::load_config(int world_size, const ProgramValues& program) const {
  ZT_CHECK(!config_path_.empty(), program_, ": no --config given");
  return zt::load_config(config_path_, overrides_, world_size, merged_program_values(program));
}

}  // namespace zt
