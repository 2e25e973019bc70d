// The examples' shared helpers: freezing by config globs, and the CPU memory meter.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/base/error.h"
#include "examples/common/cpu_memory_meter.h"
#include "examples/common/freeze_parameters.h"

namespace zt::examples {
namespace {

struct TwoLayerImpl : torch::nn::Module {
  TwoLayerImpl() {
    embed = register_module("embed", torch::nn::Embedding(10, 4));
    fc = register_module("fc", torch::nn::Linear(4, 2));
  }
  torch::nn::Embedding embed{nullptr};
  torch::nn::Linear fc{nullptr};
};

TEST(FreezeParameters, GlobsOverFullNames) {
  TwoLayerImpl m;
  EXPECT_EQ(freeze_parameters(m, {"embed.*", "fc.b?as"}),
            (std::vector<std::string>{"embed.weight", "fc.bias"}));
  EXPECT_FALSE(m.embed->weight.requires_grad());
  EXPECT_FALSE(m.fc->bias.requires_grad());
  EXPECT_TRUE(m.fc->weight.requires_grad());
  EXPECT_TRUE(freeze_parameters(m, {}).empty());
}

TEST(FreezeParameters, PatternMatchingNothingIsAnError) {
  TwoLayerImpl m;
  try {
    freeze_parameters(m, {"fc.*", "wte.*"});
    FAIL() << "no error";
  } catch (const zt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'wte.*'"), std::string::npos) << e.what();
  }
}

TEST(CpuMemoryMeter, CountsLiveAndPeakBytes) {
  CpuMemoryMeter::install();
  ASSERT_TRUE(CpuMemoryMeter::installed());
  const int64_t base = CpuMemoryMeter::live_bytes();
  CpuMemoryMeter::reset_peak();
  {
    at::Tensor a = at::empty({1 << 20}, at::kFloat);  // 4 MiB
    EXPECT_EQ(CpuMemoryMeter::live_bytes() - base, 4 << 20);
    at::Tensor b = at::empty({1 << 18}, at::kFloat);  // 1 MiB
    EXPECT_EQ(CpuMemoryMeter::live_bytes() - base, 5 << 20);
  }
  EXPECT_EQ(CpuMemoryMeter::live_bytes(), base);
  EXPECT_EQ(CpuMemoryMeter::peak_bytes() - base, 5 << 20);
  CpuMemoryMeter::reset_peak();
  EXPECT_EQ(CpuMemoryMeter::peak_bytes(), base);
}

}  // namespace
}  // namespace zt::examples
