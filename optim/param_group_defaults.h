#pragma once
// The parameter groups' name defaults, without LibTorch, so the config's header
// (core/config/config.h) and the groups themselves (optim/param_groups.h) share one list.

#include <string>
#include <vector>

namespace zt::optim {

// The config's parameter_groups.no_decay default: biases and norms get no weight decay, as the
// Hugging Face Trainer groups them.
inline std::vector<std::string> default_no_decay_patterns() {
  return {"bias", "norm", "ln_", "LayerNorm"};
}

}  // namespace zt::optim
