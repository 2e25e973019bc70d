#include "train/parameter_snapshot.h"

#include <ATen/ATen.h>

#include "base/error.h"

namespace zt::train {

ParameterSnapshot::ParameterSnapshot(Engine& engine) {
  Engine::GatheredParameters full(engine);
  for (const auto& p : engine.model()->named_parameters(/*recurse=*/true)) {
    values_.emplace_back(p.key(), p.value().detach().clone());
  }
}

ParameterChanges ParameterSnapshot::compare(Engine& engine) const {
  Engine::GatheredParameters full(engine);
  ParameterChanges c;
  size_t k = 0;
  for (const auto& p : engine.model()->named_parameters(/*recurse=*/true)) {
    ZT_CHECK(k < values_.size() && values_[k].first == p.key(),
             "parameter snapshot: the model's parameters changed since the snapshot at ", p.key());
    // Compared as bytes: equal NaNs count as unchanged, and -0 differs from +0.
    const at::Tensor& before = values_[k++].second;
    const at::Tensor now = p.value().detach();
    const bool same = before.sizes() == now.sizes() && before.dtype() == now.dtype() &&
                      at::equal(before.contiguous().view(at::kByte).flatten(),
                                now.contiguous().view(at::kByte).flatten());
    if (p.value().requires_grad()) {
      ++c.trainable;
      if (same) {
        c.trainable_kept.push_back(p.key());
      } else {
        ++c.trainable_changed;
      }
    } else {
      ++c.frozen;
      if (same) {
        ++c.frozen_unchanged;
      } else {
        c.frozen_moved.push_back(p.key());
      }
    }
  }
  return c;
}

}  // namespace zt::train
