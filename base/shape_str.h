#pragma once
// A tensor shape as error messages print it, "[2, 3]" ("[]" for a scalar), so that every message
// about mismatched shapes reads the same whichever area raised it. A template over any range of
// integers (at::IntArrayRef, std::vector<int64_t>, ...), so base stays free of LibTorch.

#include <string>

namespace zt {

template <typename Dims>
std::string shape_str(const Dims& dims) {
  std::string r = "[";
  bool first = true;
  for (const auto d : dims) {
    if (!first) r += ", ";
    r += std::to_string(d);
    first = false;
  }
  return r + "]";
}

}  // namespace zt
