// Schedules against values computed by hand from DeepSpeed's formulas at listed steps.
#include "optim/lr_schedule.h"

#include <cmath>

#include <gtest/gtest.h>

#include "base/error.h"

namespace {

using zt::optim::make_lr_schedule;

TEST(LrSchedule, WarmupLrLogAndLinear) {
  // log: lr = min + (max - min) * ln(step + 1) / ln(n), n = 100.
  auto s = make_lr_schedule(
      "WarmupLR", {{"warmup_min_lr", 0.0}, {"warmup_max_lr", 0.01}, {"warmup_num_steps", 100}},
      /*base_lr=*/0.5);
  EXPECT_DOUBLE_EQ(s->lr_at(-1), 0.0);
  EXPECT_DOUBLE_EQ(s->lr_at(0), 0.0);
  EXPECT_NEAR(s->lr_at(9), 0.01 * std::log(10.0) / std::log(100.0), 1e-15);  // 0.005
  EXPECT_NEAR(s->lr_at(9), 0.005, 1e-15);
  EXPECT_NEAR(s->lr_at(99), 0.01, 1e-15);  // ln(100)/ln(100)
  EXPECT_DOUBLE_EQ(s->lr_at(100), 0.01);
  EXPECT_DOUBLE_EQ(s->lr_at(100000), 0.01);
  EXPECT_FALSE(s->beta1_at(5).has_value());

  auto lin = make_lr_schedule("WarmupLR", {{"warmup_min_lr", 1e-4}, {"warmup_num_steps", 10}},
                              /*base_lr=*/1.1e-3, {{"warmup_type", "linear"}});
  EXPECT_DOUBLE_EQ(lin->lr_at(-1), 1e-4);
  EXPECT_NEAR(lin->lr_at(5), 1e-4 + 1e-3 * 0.5, 1e-15);  // max defaults to base_lr
  EXPECT_NEAR(lin->lr_at(10), 1.1e-3, 1e-15);
}

TEST(LrSchedule, WarmupNumStepsIsAtLeastTwo) {
  auto s = make_lr_schedule("WarmupLR", {{"warmup_num_steps", 1}, {"warmup_max_lr", 1.0}}, 1.0,
                            {{"warmup_type", "linear"}});
  EXPECT_DOUBLE_EQ(s->lr_at(1), 0.5);  // n = max(2, 1)
  EXPECT_DOUBLE_EQ(s->lr_at(2), 1.0);
  // 0, as the Hugging Face Trainer fills "auto" by default, is accepted the same way.
  auto z = make_lr_schedule("WarmupLR", {{"warmup_num_steps", 0}, {"warmup_max_lr", 1.0}}, 1.0,
                            {{"warmup_type", "linear"}});
  EXPECT_DOUBLE_EQ(z->lr_at(1), 0.5);
  EXPECT_DOUBLE_EQ(z->lr_at(2), 1.0);
}

TEST(LrSchedule, WarmupDecayLr) {
  // Linear warmup over 10 steps to 0.1, then linear decay hitting 0 at step 110.
  auto s = make_lr_schedule(
      "WarmupDecayLR", {{"total_num_steps", 110}, {"warmup_max_lr", 0.1}, {"warmup_num_steps", 10}},
      0.0, {{"warmup_type", "linear"}});
  EXPECT_NEAR(s->lr_at(4), 0.04, 1e-15);
  EXPECT_NEAR(s->lr_at(10), 0.1, 1e-15);   // (110 - 10) / 100
  EXPECT_NEAR(s->lr_at(60), 0.05, 1e-15);  // (110 - 60) / 100
  EXPECT_NEAR(s->lr_at(109), 0.001, 1e-15);
  EXPECT_DOUBLE_EQ(s->lr_at(110), 0.0);
  EXPECT_DOUBLE_EQ(s->lr_at(500), 0.0);
  EXPECT_THROW(make_lr_schedule("WarmupDecayLR", {}, 0.1), zt::Error);  // total_num_steps
}

TEST(LrSchedule, WarmupCosineLr) {
  // base 2.0, linear warmup over 10 steps from ratio 0.1, cosine over the next 90 to 0.01.
  auto s = make_lr_schedule("WarmupCosineLR",
                            {{"total_num_steps", 100},
                             {"warmup_num_steps", 10},
                             {"warmup_min_ratio", 0.1},
                             {"cos_min_ratio", 0.01}},
                            2.0, {{"warmup_type", "linear"}});
  EXPECT_DOUBLE_EQ(s->lr_at(-1), 0.0);
  EXPECT_NEAR(s->lr_at(0), 2.0 * 0.1, 1e-15);
  EXPECT_NEAR(s->lr_at(5), 2.0 * (0.1 + 0.5 * 0.9), 1e-15);
  // step 10: real_last 1 of 90
  EXPECT_NEAR(s->lr_at(10), 2.0 * (0.01 + 0.99 * (1 + std::cos(M_PI / 90)) / 2), 1e-14);
  // step 54: real_last 45 of 90 -> cos(pi/2) = 0 -> ratio 0.01 + 0.99 / 2
  EXPECT_NEAR(s->lr_at(54), 2.0 * 0.505, 1e-14);
  EXPECT_NEAR(s->lr_at(99), 2.0 * 0.01, 1e-14);
  EXPECT_NEAR(s->lr_at(1000), 2.0 * 0.01, 1e-14);  // clamped, not oscillating
}

TEST(LrSchedule, OneCycleTriangleThenDecay) {
  // 10 steps up from 0.01 to 0.1, 10 down, then lr = 0.01 / (1 + 0.5 * k / 5).
  auto s = make_lr_schedule("OneCycle",
                            {{"cycle_min_lr", 0.01},
                             {"cycle_max_lr", 0.1},
                             {"cycle_first_step_size", 10},
                             {"decay_lr_rate", 0.5},
                             {"decay_step_size", 5},
                             {"cycle_min_mom", 0.85},
                             {"cycle_max_mom", 0.95},
                             {"decay_mom_rate", 0.1}},
                            0.0);
  // scale at step s: iteration s+1; x = (s+1)/20 in the first cycle; up while x <= 0.5.
  EXPECT_NEAR(s->lr_at(-1), 0.01, 1e-15);
  EXPECT_NEAR(s->lr_at(4), 0.01 + 0.09 * 0.5, 1e-15);   // x = 0.25
  EXPECT_NEAR(s->lr_at(9), 0.1, 1e-15);                 // x = 0.5, the peak
  EXPECT_NEAR(s->lr_at(14), 0.01 + 0.09 * 0.5, 1e-15);  // x = 0.75
  EXPECT_NEAR(s->lr_at(19), 0.01, 1e-15);               // back to the floor... (x wraps to 0)
  EXPECT_NEAR(s->lr_at(24), 0.01 / (1 + 0.5 * 5.0 / 5), 1e-15);  // decay_interval = 5/5
  EXPECT_NEAR(*s->beta1_at(9), 0.85, 1e-15);                     // momentum mirrors lr
  EXPECT_NEAR(*s->beta1_at(4), 0.90, 1e-15);
  EXPECT_NEAR(*s->beta1_at(24), 0.95 * (1 + 0.1), 1e-15);
}

TEST(LrSchedule, OneCycleStairsHoldTheLr) {
  // 4 stairs over a first half of 8 steps: the lr moves every 2 steps.
  auto s = make_lr_schedule("OneCycle",
                            {{"cycle_min_lr", 0.0},
                             {"cycle_max_lr", 1.0},
                             {"cycle_first_step_size", 8},
                             {"cycle_first_stair_count", 4},
                             {"cycle_momentum", 0}},
                            0.0);
  EXPECT_DOUBLE_EQ(s->lr_at(0), 0.0);   // iteration 1: floor(1 * 4 / 8) / 4
  EXPECT_DOUBLE_EQ(s->lr_at(1), 0.25);  // iteration 2
  EXPECT_DOUBLE_EQ(s->lr_at(2), 0.25);
  EXPECT_DOUBLE_EQ(s->lr_at(7), 1.0);   // iteration 8: the peak
  EXPECT_DOUBLE_EQ(s->lr_at(9), 0.75);  // iteration 10: (16 - 10) * 4 / 8 = 3
  EXPECT_FALSE(s->beta1_at(3).has_value());
}

TEST(LrSchedule, RejectsUnknownTypesAndParameters) {
  EXPECT_THROW(make_lr_schedule("Cosine", {}, 0.1), zt::Error);
  try {
    make_lr_schedule("WarmupLR", {{"warmup_steps", 10}}, 0.1);
    FAIL() << "unknown parameter accepted";
  } catch (const zt::Error& e) {
    EXPECT_NE(e.message().find("warmup_steps"), std::string::npos) << e.message();
  }
  EXPECT_THROW(make_lr_schedule("WarmupLR", {}, 0.1, {{"warmup_type", "exp"}}), zt::Error);
  EXPECT_THROW(make_lr_schedule("WarmupLR", {{"warmup_num_steps", 2.5}}, 0.1), zt::Error);
  EXPECT_THROW(make_lr_schedule("OneCycle", {{"cycle_min_lr", 0.1}}, 0.1), zt::Error);
}

}  // namespace
