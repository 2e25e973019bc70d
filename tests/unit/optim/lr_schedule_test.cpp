// Schedules against values computed by hand from DeepSpeed's formulas
// (deepspeed/runtime/lr_schedules.py) at listed steps.
#include "optim/lr_schedule.h"

#include <cmath>

#include <gtest/gtest.h>

namespace {

using zt::optim::make_lr_schedule;
using zt::optim::ScheduleKind;
using zt::optim::ScheduleSpec;
using zt::optim::WarmupShape;

ScheduleSpec spec(ScheduleKind kind) {
  ScheduleSpec s;
  s.type = kind;
  return s;
}

TEST(LrSchedule, WarmupLrLogAndLinear) {
  // log: lr = min + (max - min) * ln(step + 1) / ln(n), n = 100.
  ScheduleSpec log = spec(ScheduleKind::kWarmupLR);
  log.warmup_max_lr = 0.01;
  log.warmup_num_steps = 100;
  auto s = make_lr_schedule(log, /*base_lr=*/0.5);
  EXPECT_DOUBLE_EQ(s->lr_at(-1), 0.0);
  EXPECT_DOUBLE_EQ(s->lr_at(0), 0.0);
  EXPECT_NEAR(s->lr_at(9), 0.01 * std::log(10.0) / std::log(100.0), 1e-15);  // 0.005
  EXPECT_NEAR(s->lr_at(9), 0.005, 1e-15);
  EXPECT_NEAR(s->lr_at(99), 0.01, 1e-15);  // ln(100)/ln(100)
  EXPECT_DOUBLE_EQ(s->lr_at(100), 0.01);
  EXPECT_DOUBLE_EQ(s->lr_at(100000), 0.01);
  EXPECT_FALSE(s->betas_at(5).has_value());

  ScheduleSpec linear = spec(ScheduleKind::kWarmupLR);
  linear.warmup_min_lr = 1e-4;
  linear.warmup_max_lr = 1.1e-3;
  linear.warmup_num_steps = 10;
  linear.warmup_type = WarmupShape::kLinear;
  auto lin = make_lr_schedule(linear, /*base_lr=*/0.5);
  EXPECT_DOUBLE_EQ(lin->lr_at(-1), 1e-4);
  EXPECT_NEAR(lin->lr_at(5), 1e-4 + 1e-3 * 0.5, 1e-15);
  EXPECT_NEAR(lin->lr_at(10), 1.1e-3, 1e-15);
}

TEST(LrSchedule, WarmupLrLogIsBitExactToDeepSpeed) {
  // DeepSpeed 0.19.8's WarmupLR(warmup_min_lr=0, warmup_max_lr=0.002, warmup_num_steps=3),
  // run: get_lr() at step 1 printed 0.0012618595071429146 (log(2) / log(3) computed as a
  // division ends one bit above).
  ScheduleSpec p = spec(ScheduleKind::kWarmupLR);
  p.warmup_max_lr = 0.002;
  p.warmup_num_steps = 3;
  auto s = make_lr_schedule(p, /*base_lr=*/0.5);
  EXPECT_EQ(s->lr_at(1), 0.0012618595071429146);
}

TEST(LrSchedule, WarmupNumStepsIsAtLeastTwo) {
  for (int64_t n : {1, 0}) {  // 0: what the Hugging Face Trainer fills "auto" with by default
    ScheduleSpec p = spec(ScheduleKind::kWarmupLR);
    p.warmup_num_steps = n;
    p.warmup_max_lr = 1.0;
    p.warmup_type = WarmupShape::kLinear;
    auto s = make_lr_schedule(p, 1.0);
    EXPECT_DOUBLE_EQ(s->lr_at(1), 0.5) << n;  // n = max(2, n)
    EXPECT_DOUBLE_EQ(s->lr_at(2), 1.0) << n;
  }
}

TEST(LrSchedule, WarmupDecayLr) {
  // Linear warmup over 10 steps to 0.1, then linear decay hitting 0 at step 110.
  ScheduleSpec p = spec(ScheduleKind::kWarmupDecayLR);
  p.total_num_steps = 110;
  p.warmup_max_lr = 0.1;
  p.warmup_num_steps = 10;
  p.warmup_type = WarmupShape::kLinear;
  auto s = make_lr_schedule(p, 0.0);
  EXPECT_NEAR(s->lr_at(4), 0.04, 1e-15);
  EXPECT_NEAR(s->lr_at(10), 0.1, 1e-15);   // (110 - 10) / 100
  EXPECT_NEAR(s->lr_at(60), 0.05, 1e-15);  // (110 - 60) / 100
  EXPECT_NEAR(s->lr_at(109), 0.001, 1e-15);
  EXPECT_DOUBLE_EQ(s->lr_at(110), 0.0);
  EXPECT_DOUBLE_EQ(s->lr_at(500), 0.0);
}

TEST(LrSchedule, WarmupCosineLr) {
  // base 2.0, linear warmup over 10 steps from ratio 0.1, cosine over the next 90 to 0.01.
  ScheduleSpec p = spec(ScheduleKind::kWarmupCosineLR);
  p.total_num_steps = 100;
  p.warmup_num_steps = 10;
  p.warmup_min_ratio = 0.1;
  p.cos_min_ratio = 0.01;
  p.warmup_type = WarmupShape::kLinear;
  auto s = make_lr_schedule(p, 2.0);
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

// OneCycle's lr and its cycled betas. DeepSpeed's OneCycle sets betas = (cycle_min_mom, 0.99) at
// construction, then (cycle_max_mom - (max - min) * scale, 0.99) at every step of the cycle and
// (cycle_max_mom * (1 + decay_mom_rate * interval), 0.99) after it.
TEST(LrSchedule, OneCycleTriangleThenDecayWithCycledBetas) {
  // 10 steps up from 0.01 to 0.1, 10 down, then lr = 0.01 / (1 + 0.5 * k / 5).
  ScheduleSpec p = spec(ScheduleKind::kOneCycle);
  p.cycle_min_lr = 0.01;
  p.cycle_max_lr = 0.1;
  p.cycle_first_step_size = 10;
  p.decay_lr_rate = 0.5;
  p.decay_step_size = 5;
  p.cycle_min_mom = 0.85;
  p.cycle_max_mom = 0.95;
  p.decay_mom_rate = 0.1;
  auto s = make_lr_schedule(p, 0.0);
  // scale at step s: iteration s+1; x = (s+1)/20 in the first cycle; up while x <= 0.5.
  EXPECT_NEAR(s->lr_at(-1), 0.01, 1e-15);
  EXPECT_NEAR(s->lr_at(4), 0.01 + 0.09 * 0.5, 1e-15);            // x = 0.25
  EXPECT_NEAR(s->lr_at(9), 0.1, 1e-15);                          // x = 0.5, the peak
  EXPECT_NEAR(s->lr_at(14), 0.01 + 0.09 * 0.5, 1e-15);           // x = 0.75
  EXPECT_NEAR(s->lr_at(19), 0.01, 1e-15);                        // back to the floor (x wraps to 0)
  EXPECT_NEAR(s->lr_at(24), 0.01 / (1 + 0.5 * 5.0 / 5), 1e-15);  // decay_interval = 5/5
  EXPECT_NEAR(s->betas_at(-1)->first, 0.85, 1e-15);              // construction: cycle_min_mom
  EXPECT_NEAR(s->betas_at(9)->first, 0.85, 1e-15);               // momentum mirrors lr
  EXPECT_NEAR(s->betas_at(4)->first, 0.90, 1e-15);
  EXPECT_NEAR(s->betas_at(24)->first, 0.95 * (1 + 0.1), 1e-15);
  for (int64_t step : {-1, 0, 9, 24}) EXPECT_EQ(s->betas_at(step)->second, 0.99) << step;
}

TEST(LrSchedule, OneCycleStairsHoldTheLr) {
  // 4 stairs over a first half of 8 steps: the lr moves every 2 steps.
  ScheduleSpec p = spec(ScheduleKind::kOneCycle);
  p.cycle_min_lr = 0.0;
  p.cycle_max_lr = 1.0;
  p.cycle_first_step_size = 8;
  p.cycle_first_stair_count = 4;
  p.cycle_momentum = false;
  auto s = make_lr_schedule(p, 0.0);
  EXPECT_DOUBLE_EQ(s->lr_at(0), 0.0);   // iteration 1: floor(1 * 4 / 8) / 4
  EXPECT_DOUBLE_EQ(s->lr_at(1), 0.25);  // iteration 2
  EXPECT_DOUBLE_EQ(s->lr_at(2), 0.25);
  EXPECT_DOUBLE_EQ(s->lr_at(7), 1.0);   // iteration 8: the peak
  EXPECT_DOUBLE_EQ(s->lr_at(9), 0.75);  // iteration 10: (16 - 10) * 4 / 8 = 3
  EXPECT_FALSE(s->betas_at(3).has_value());
}

}  // namespace
