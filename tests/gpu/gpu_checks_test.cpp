// GoogleTest driver of the GPU checks (gpu_checks.h): one case per check, skipped with the
// reason when the CUDA plugin or a GPU is missing. With ZT_TEST_DEVICE set (zttest: the test
// device's ctest leg, label device), the checks run on that device instead, loaded here.
#include "tests/gpu/gpu_checks.h"

#include <cctype>
#include <cstdlib>

#include <gtest/gtest.h>

#include "base/error.h"
#include "parallel/env.h"
#include "train/device.h"

namespace {

void choose_device() {
  static const bool chosen = [] {
    const char* spec = std::getenv("ZT_TEST_DEVICE");
    if (spec != nullptr && *spec != '\0') {
      zt::gpu_checks::set_device(zt::resolve_device(spec, zt::dist::Env{}));
    }
    return true;
  }();
  (void)chosen;
}

class GpuCheck : public testing::TestWithParam<size_t> {};

TEST_P(GpuCheck, MatchesCpuReference) {
  choose_device();
  const std::string why = zt::gpu_checks::device_unavailable();
  if (!why.empty()) GTEST_SKIP() << "no usable " << zt::gpu_checks::device() << ": " << why;
  const auto& check = zt::gpu_checks::all_checks()[GetParam()];
  if (check.cuda_kernels && !zt::gpu_checks::device().is_cuda()) {
    GTEST_SKIP() << check.name << " checks CUDA kernels; the device is "
                 << zt::gpu_checks::device();
  }
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
  EXPECT_EQ(zt::gpu_checks::all_checks().size(), 8u);
}

}  // namespace
