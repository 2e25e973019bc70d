// wall_clock_breakdown's phase timer (core/profile/phase_timer.h): the host's clock for a model on
// the CPU, timing events on the device's current stream for one on an accelerator (here the test
// device, which, as CUDA, refuses elapsed times of events created without timing).

#include "core/profile/phase_timer.h"

#include <chrono>
#include <cstdlib>
#include <thread>

#include <gtest/gtest.h>

#include "base/error.h"
#include "testdevice/test_device.h"

namespace zt::profile {
namespace {

void busy(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// Each phase's intervals add up, the others stay at zero, and take() starts the next period.
void expect_phases_add_up(PhaseTimer& t) {
  t.start(PhaseTimer::kForward);
  busy(20);
  t.stop(PhaseTimer::kForward);
  t.start(PhaseTimer::kForward);
  busy(20);
  t.stop(PhaseTimer::kForward);
  t.start(PhaseTimer::kStep);
  busy(10);
  t.stop(PhaseTimer::kStep);
  const auto ms = t.take();
  EXPECT_GE(ms[PhaseTimer::kForward], 40.0);
  EXPECT_LT(ms[PhaseTimer::kForward], 4000.0);
  EXPECT_GE(ms[PhaseTimer::kStep], 10.0);
  EXPECT_LT(ms[PhaseTimer::kStep], ms[PhaseTimer::kForward]);
  EXPECT_EQ(ms[PhaseTimer::kBackward], 0.0);
  const auto next = t.take();
  for (double v : next) EXPECT_EQ(v, 0.0);
}

TEST(PhaseTimer, OnTheHostPhasesAreTheHostsClock) {
  PhaseTimer t(c10::Device(c10::kCPU));
  EXPECT_FALSE(t.on_device());
  expect_phases_add_up(t);
}

TEST(PhaseTimer, OnADevicePhasesAreTimedByEventsOnItsStream) {
  testdevice::load_test_device(std::getenv(testdevice::kLibraryEnv));
  PhaseTimer t(testdevice::test_device(1));
  EXPECT_TRUE(t.on_device());
  expect_phases_add_up(t);
  // An interval left open (an exception between start and stop) is not counted; a stop without
  // its start is an error.
  t.start(PhaseTimer::kBackward);
  EXPECT_EQ(t.take()[PhaseTimer::kBackward], 0.0);
  EXPECT_THROW(t.stop(PhaseTimer::kBackward), Error);
}

}  // namespace
}  // namespace zt::profile
