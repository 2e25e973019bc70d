#include "train/swa_weights.h"

#include <torch/torch.h>

#include "base/error.h"
#include "optim/swa.h"

namespace zt::train {

bool load_swa_weights(Engine& engine) {
  auto states = engine.shard_states();
  // Every rank steps the same number of times, so they agree on whether an average exists.
  for (const auto& s : states) {
    auto* swa = dynamic_cast<optim::SwaShardOptimizer*>(s.optimizer);
    if (swa == nullptr || !swa->average().defined()) return false;
  }
  {
    torch::NoGradGuard no_grad;
    for (auto& s : states) {
      s.master.copy_(dynamic_cast<optim::SwaShardOptimizer*>(s.optimizer)->average());
    }
  }
  engine.sync_params_from_masters();
  return true;
}

}  // namespace zt::train
