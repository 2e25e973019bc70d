#include "train/freeze.h"

#include "base/error.h"
#include "optim/param_groups.h"

namespace zt {

std::vector<std::string> freeze_parameters(torch::nn::Module& model,
                                           const std::vector<std::string>& patterns) {
  std::vector<std::string> frozen;
  std::vector<bool> used(patterns.size(), false);
  for (auto& p : model.named_parameters(/*recurse=*/true)) {
    bool match = false;
    for (size_t k = 0; k < patterns.size(); ++k) {
      if (optim::glob_match(patterns[k], p.key())) used[k] = match = true;
    }
    if (!match) continue;
    p.value().set_requires_grad(false);
    frozen.push_back(p.key());
  }
  for (size_t k = 0; k < patterns.size(); ++k) {
    ZT_CHECK(used[k], "freeze: pattern '", patterns[k], "' matches no parameter of the model");
  }
  return frozen;
}

}  // namespace zt
