#pragma once
// The comms logger's options (parallel/comms_logger.h), apart from the logger so that the config
// (core/config/config.h) holds them without the implementation: DeepSpeed's `comms_logger` block
// with its defaults.

#include <string>
#include <vector>

namespace zt::dist {

struct CommsLoggerOptions {
  bool enabled = false;
  bool verbose = false;
  bool prof_all = true;
  std::vector<std::string> prof_ops;
  bool debug = false;
};

}  // namespace zt::dist
