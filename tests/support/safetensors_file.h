#pragma once
// Writes named tensors to one safetensors file, in the given order, with the project's writer:
// the fixtures of the tests that load pretrained weights.

#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "weights/safetensors_writer.h"

namespace zt::testing {

using NamedTensorList = std::vector<std::pair<std::string, at::Tensor>>;

inline void write_safetensors(const std::string& path, const NamedTensorList& tensors) {
  std::vector<SafetensorsWriter::Entry> entries;
  for (const auto& [n, t] : tensors) entries.push_back({n, t.scalar_type(), t.sizes().vec()});
  SafetensorsWriter w(path, entries);
  for (const auto& [n, t] : tensors) w.write(n, t);
  w.commit();
}

}  // namespace zt::testing
