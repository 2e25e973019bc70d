#include "core/config/cli_options.h"

#include <cctype>
#include <iostream>
#include <sstream>

#include "core/base/error.h"

namespace zt {

namespace po = boost::program_options;

CliOptions::CliOptions(std::string program, std::string summary, CliOptionsSpec spec)
    : program_(std::move(program)), summary_(std::move(summary)), spec_(spec), options_("Options") {
  options_.add_options()("help,h", "print this help and exit");
  if (spec_.config) {
    options_.add_options()("config,c", po::value<std::string>()->value_name("FILE"),
                           "training config, JSON or YAML (DeepSpeed keys)")(
        "set", po::value<std::vector<std::string>>()->composing()->value_name("KEY=VALUE"),
        "override a config key, repeatable (e.g. --set zero_optimization.stage=3)");
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

Config CliOptions::load_config(int world_size, const ProgramValues& program) const {
  ZT_CHECK(!config_path_.empty(), program_, ": no --config given");
  return zt::load_config(config_path_, overrides_, world_size, program);
}

}  // namespace zt
