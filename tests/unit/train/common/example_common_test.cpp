// The training helpers the examples share (train/): the CPU memory meter.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "train/cpu_memory_meter.h"

namespace zt::train {
namespace {

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
}  // namespace zt::train
