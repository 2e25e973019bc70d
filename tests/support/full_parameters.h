#pragma once
// A sharded engine seen whole, for tests that compare two constructions or loads of one model:
// every parameter's full values (gathered unit by unit, cloned), and a bit-for-bit comparison of
// two such maps that names the parameter that differs.

#include <map>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/engine.h"

namespace zt::testing {

using FullParameters = std::map<std::string, at::Tensor>;

inline FullParameters full_parameters(Engine& e) {
  FullParameters out;
  e.for_each_full_parameter(
      [&](const std::string& n, const at::Tensor& t) { out[n] = t.detach().clone(); });
  return out;
}

inline void expect_identical(const FullParameters& a, const FullParameters& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_TRUE(torch::equal(t, b.at(name))) << name << " differs";
  }
}

}  // namespace zt::testing
