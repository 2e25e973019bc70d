#pragma once
// ParameterSnapshot: a full copy of a model's parameters taken through the engine (gathered at
// stage 3), to check after training which parameters changed. The check is bitwise: a frozen
// parameter must come out bit-identical, in its compute dtype, while trainable ones must move.
//
//   ParameterSnapshot before(engine);            // collective at stage 3: every rank calls it
//   ... train ...
//   ParameterChanges c = before.compare(engine); // collective too

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/engine.h"

namespace zt::train {

struct ParameterChanges {
  int64_t frozen = 0;            // parameters (tensors) with requires_grad false
  int64_t frozen_unchanged = 0;  // ... bit-identical to the snapshot
  int64_t trainable = 0;
  int64_t trainable_changed = 0;            // ... with at least one element different
  std::vector<std::string> frozen_moved;    // names of frozen parameters that changed (a bug)
  std::vector<std::string> trainable_kept;  // names of trainable parameters that did not
};

class ParameterSnapshot {
 public:
  explicit ParameterSnapshot(Engine& engine);
  ParameterChanges compare(Engine& engine) const;

 private:
  std::vector<std::pair<std::string, at::Tensor>> values_;  // name -> clone, compute dtype
};

}  // namespace zt::train
