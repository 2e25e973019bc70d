// GoogleTest driver of the GPU checks (gpu_checks.h): one case per check, skipped with the
// reason when the CUDA plugin or a GPU is missing.
#include "tests/gpu/gpu_checks.h"

#include <cctype>

#include <gtest/gtest.h>

#include "base/error.h"

namespace {

class GpuCheck : public testing::TestWithParam<size_t> {};

TEST_P(GpuCheck, MatchesCpuReference) {
  const std::string why = zt::gpu_checks::cuda_unavailable();
  if (!why.empty()) GTEST_SKIP() << "no usable GPU: " << why;
  const auto& check = zt::gpu_checks::all_checks()[GetParam()];
  try {
    check.run();
  } catch (const zt::Error& e) {
    FAIL() << check.name << ": " << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(All, GpuCheck,
                         testing::Range(size_t{0}, zt::gpu_checks::all_checks().size()),
                         [](const testing::TestParamInfo<size_t>& i) {
                           // nccl_one_rank -> NcclOneRank (GoogleTest names: no underscores)
                           std::string name;
                           bool upper = true;
                           for (char c : zt::gpu_checks::all_checks()[i.param].name) {
                             if (c == '_') {
                               upper = true;
                             } else {
                               name += upper ? static_cast<char>(std::toupper(c)) : c;
                               upper = false;
                             }
                           }
                           return name;
                         });

TEST(GpuCheck, ListIsComplete) {
  EXPECT_EQ(zt::gpu_checks::all_checks().size(), 7u);
}

}  // namespace
