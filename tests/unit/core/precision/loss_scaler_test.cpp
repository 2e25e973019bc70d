// DynamicLossScaler against DeepSpeed's DynamicLossScaler.update_scale
// (deepspeed/runtime/fp16/loss_scaler.py, with its stable_interval rule). Two kinds of test:
// tables worked out by hand from DeepSpeed's code ('O' an iteration with inf/NaN gradients, 'C' a
// clean one; each table lists the scale after every iteration), and random sequences compared
// with DeepSpeedReference, a line-by-line transliteration of update_scale kept in this file so
// the test does not depend on our implementation's reading of it.
#include "core/precision/loss_scaler.h"

#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"

namespace {

// DeepSpeed's DynamicLossScaler, fields and update_scale as in its source (scale_factor 2).
struct DeepSpeedReference {
  double cur_scale;
  int64_t cur_iter = 0;
  int64_t last_overflow_iter = -1;
  double scale_factor = 2.0;
  int64_t scale_window;
  double min_scale;
  int delayed_shift;
  int cur_hysteresis;
  bool consecutive_hysteresis;

  DeepSpeedReference(double init_scale, int64_t window, double min, int shift, bool consecutive)
      : cur_scale(init_scale),
        scale_window(window),
        min_scale(min),
        delayed_shift(shift),
        cur_hysteresis(shift),
        consecutive_hysteresis(consecutive) {}

  void update_scale(bool overflow) {
    if (overflow) {
      if (delayed_shift == 1 || cur_hysteresis == 1) {
        if (cur_scale == min_scale) throw std::runtime_error("already at minimum");
        cur_scale = std::max(cur_scale / scale_factor, min_scale);
      } else {
        cur_hysteresis -= 1;
      }
      last_overflow_iter = cur_iter;
    } else {
      if (consecutive_hysteresis) cur_hysteresis = delayed_shift;
      const int64_t stable_interval = (cur_iter - last_overflow_iter) - 1;
      if (stable_interval > 0 && stable_interval % scale_window == 0) {
        if (!consecutive_hysteresis) cur_hysteresis = delayed_shift;
        cur_scale *= scale_factor;
      }
    }
    cur_iter += 1;
  }
};

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

// Window 4 from a fresh start, where an off-by-one would double a step early. stable_interval on
// iteration i is i (last overflow -1), so the first doubling is on iteration 4, not 3.
TEST(LossScaler, WindowFourFirstDoublesOnIterationFour) {
  zt::DynamicLossScaler s(opts(2, 4));
  EXPECT_EQ(run(s, "CCCCC"), (std::vector<double>{16, 16, 16, 16, 32}));
}

TEST(LossScaler, FirstDoublingAfterAFullWindowOfCleanSteps) {
  zt::DynamicLossScaler s(opts(2, 3));
  // stable_interval 0,1,2,3 -> double, 4,5,6 -> double, 7.
  EXPECT_EQ(run(s, "CCCCCCCC"), (std::vector<double>{16, 16, 16, 32, 32, 32, 64, 64}));
}

TEST(LossScaler, HysteresisOneWindowThree) {
  zt::DynamicLossScaler s(opts(1, 3));
  // i0 O: halve (last 0); i1..i3 C: stable 0, 1, 2; i4 C: stable 3 -> double; four overflows.
  EXPECT_EQ(run(s, "OCCCCOOOO"), (std::vector<double>{8, 8, 8, 8, 16, 8, 4, 2, 1}));
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
  // i0 O: counter 2 -> 1, scale stays; i1 O: counter at 1 -> halve (last 1);
  // i2..i4 C: stable 0..2; i5 C: stable 3 -> double, counter refilled to 2;
  // i6 O: counter -> 1 (last 6); i7 C: stable 0, counter stays 1 (not consecutive);
  // i8 O: counter at 1 -> halve.
  EXPECT_EQ(run(s, "OOCCCCOCO"), (std::vector<double>{16, 8, 8, 8, 8, 16, 16, 16, 8}));
  EXPECT_EQ(s.hysteresis_left(), 1);
  EXPECT_EQ(s.last_overflow_iteration(), 8);
}

TEST(LossScaler, ConsecutiveHysteresisRefillsOnEveryCleanStep) {
  zt::DynamicLossScaler s(opts(2, 3, /*consecutive=*/true));
  // i0 O: counter -> 1; i1 C: refilled to 2; i2 O: -> 1, stays; i3 O: halve.
  EXPECT_EQ(run(s, "OCOO"), (std::vector<double>{16, 16, 16, 8}));
}

TEST(LossScaler, MinimumClampsTheHalving) {
  zt::LossScalerOptions o = opts(1, 100);
  o.initial_scale_power = 2;  // 4
  o.min_loss_scale = 3;
  zt::DynamicLossScaler s(o);
  EXPECT_EQ(run(s, "O"), (std::vector<double>{3}));
  EXPECT_THROW(s.update(true), zt::Error);
}

// DeepSpeed raises only when cur_scale == min_scale; a scale below the minimum is lifted to it.
TEST(LossScaler, ScaleBelowTheMinimumIsRaisedToIt) {
  zt::LossScalerOptions o = opts(1, 100);
  o.initial_scale_power = 1;  // 2
  o.min_loss_scale = 3;
  zt::DynamicLossScaler s(o);
  EXPECT_EQ(run(s, "O"), (std::vector<double>{3}));
  EXPECT_THROW(s.update(true), zt::Error);
}

TEST(LossScaler, MatchesDeepSpeedOnRandomSequences) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const int hysteresis = 1 + static_cast<int>(rng() % 3);
    const int64_t window = 1 + static_cast<int64_t>(rng() % 5);
    const bool consecutive = rng() % 2 == 0;
    zt::LossScalerOptions o = opts(hysteresis, window, consecutive);
    o.initial_scale_power = 8;
    zt::DynamicLossScaler ours(o);
    DeepSpeedReference ds(256.0, window, 1.0, hysteresis, consecutive);
    const double p_overflow = 0.1 + 0.5 * (trial % 5) / 4.0;
    for (int i = 0; i < 60; ++i) {
      const bool overflow = std::uniform_real_distribution<double>(0, 1)(rng) < p_overflow;
      bool ds_raised = false;
      try {
        ds.update_scale(overflow);
      } catch (const std::runtime_error&) {
        ds_raised = true;
      }
      bool ours_raised = false;
      try {
        ours.update(overflow);
      } catch (const zt::Error&) {
        ours_raised = true;
      }
      ASSERT_EQ(ours_raised, ds_raised) << "trial " << trial << " iteration " << i;
      if (ds_raised) break;
      ASSERT_EQ(ours.scale(), ds.cur_scale) << "trial " << trial << " iteration " << i;
      ASSERT_EQ(ours.hysteresis_left(), ds.cur_hysteresis) << "trial " << trial;
      ASSERT_EQ(ours.last_overflow_iteration(), ds.last_overflow_iter) << "trial " << trial;
    }
  }
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
  EXPECT_EQ(run(a, "COOCCCCC"), run(b, "COOCCCCC"));
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
