// DynamicLossScaler against tables worked out by hand from DeepSpeed's update_scale rules
// (core/precision/loss_scaler.h). 'O' is an iteration with inf/NaN gradients, 'C' a clean one; each table
// lists the scale after every iteration.
#include "core/precision/loss_scaler.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/base/error.h"

namespace {

std::vector<double> run(zt::DynamicLossScaler& s, const std::string& outcomes) {
  std::vector<double> scales;
  for (char c : outcomes) {
    s.update(c == 'O');
    scales.push_back(s.scale());
  }
  return scales;
}

zt::LossScalerOptions opts(int hysteresis, int64_t window, bool consecutive = false) {
  zt::LossScalerOptions o;
  o.initial_scale_power = 4;  // 16
  o.loss_scale_window = window;
  o.hysteresis = hysteresis;
  o.consecutive_hysteresis = consecutive;
  o.min_loss_scale = 1;
  return o;
}

TEST(LossScaler, StartsAtTwoToTheInitialPower) {
  EXPECT_EQ(zt::DynamicLossScaler(opts(2, 3)).scale(), 16.0);
  zt::LossScalerOptions o;
  EXPECT_EQ(zt::DynamicLossScaler(o).scale(), 65536.0);  // DeepSpeed's default power 16
}

TEST(LossScaler, HysteresisOneWindowThree) {
  zt::DynamicLossScaler s(opts(1, 3));
  // i0 O: halve (last=0); i1,i2 C: 1, 2 clean since; i3 C: 3 -> double; then four overflows.
  EXPECT_EQ(run(s, "OCCCOOOO"), (std::vector<double>{8, 8, 8, 16, 8, 4, 2, 1}));
  EXPECT_TRUE(s.at_minimum());
  try {
    s.update(true);
    FAIL() << "an overflow at the minimum scale must stop the run";
  } catch (const zt::Error& e) {
    EXPECT_NE(e.message().find("minimum"), std::string::npos) << e.message();
  }
}

TEST(LossScaler, HysteresisTwoWindowThree) {
  zt::DynamicLossScaler s(opts(2, 3));
  // i0 O: counter 2 -> 1, scale stays; i1 O: counter at 1 -> halve (last=1);
  // i2, i3 C; i4 C: 3 clean since i1 -> double, counter refilled to 2;
  // i5 O: counter -> 1 (last=5); i6 C: not a window multiple, counter stays 1 (not consecutive);
  // i7 O: counter at 1 -> halve.
  EXPECT_EQ(run(s, "OOCCCOCO"), (std::vector<double>{16, 8, 8, 8, 16, 16, 16, 8}));
  EXPECT_EQ(s.hysteresis_left(), 1);
  EXPECT_EQ(s.last_overflow_iteration(), 7);
}

TEST(LossScaler, ConsecutiveHysteresisRefillsOnEveryCleanStep) {
  zt::DynamicLossScaler s(opts(2, 3, /*consecutive=*/true));
  // i0 O: counter -> 1; i1 C: refilled to 2; i2 O: -> 1, stays; i3 O: halve.
  EXPECT_EQ(run(s, "OCOO"), (std::vector<double>{16, 16, 16, 8}));
}

TEST(LossScaler, FirstDoublingAfterAFullWindowOfCleanSteps) {
  zt::DynamicLossScaler s(opts(2, 3));
  EXPECT_EQ(run(s, "CCCCCC"), (std::vector<double>{16, 16, 32, 32, 32, 64}));
}

TEST(LossScaler, MinimumClampsTheHalving) {
  zt::LossScalerOptions o = opts(1, 100);
  o.initial_scale_power = 2;  // 4
  o.min_loss_scale = 3;
  zt::DynamicLossScaler s(o);
  EXPECT_EQ(run(s, "O"), (std::vector<double>{3}));
  EXPECT_THROW(s.update(true), zt::Error);
}

TEST(LossScaler, StaticScaleNeverMoves) {
  zt::LossScalerOptions o;
  o.loss_scale = 128;
  zt::DynamicLossScaler s(o);
  EXPECT_FALSE(s.dynamic());
  EXPECT_EQ(run(s, "OOOOCCCC"), std::vector<double>(8, 128));
}

TEST(LossScaler, StateRoundTripsExactly) {
  zt::DynamicLossScaler a(opts(2, 3));
  run(a, "OOCCOC");
  zt::DynamicLossScaler b(opts(2, 3));
  b.load_state(a.state());
  EXPECT_EQ(run(a, "COOCCC"), run(b, "COOCCC"));
  EXPECT_THROW(b.load_state({{"scale", 1.0}}), zt::Error);
}

TEST(LossScaler, BadOptionsNameTheKey) {
  zt::LossScalerOptions o;
  o.hysteresis = 0;
  try {
    zt::DynamicLossScaler s(o);
    FAIL();
  } catch (const zt::Error& e) {
    EXPECT_NE(e.message().find("fp16.hysteresis"), std::string::npos);
  }
}

}  // namespace
