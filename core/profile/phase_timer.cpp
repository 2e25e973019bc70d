#include "core/profile/phase_timer.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include "base/error.h"

namespace zt::profile {
namespace {

// A timing event recorded now on the current stream of `device`.
std::unique_ptr<c10::Event> record_on(const c10::Device& device) {
  auto e = std::make_unique<c10::Event>(device.type(), c10::EventFlag::BACKEND_DEFAULT);
  e->record(c10::impl::VirtualGuardImpl(device.type()).getStream(device));
  return e;
}

}  // namespace

PhaseTimer::PhaseTimer(c10::Device device) : device_(device) {}
PhaseTimer::~PhaseTimer() = default;

void PhaseTimer::start(Phase p) {
  if (!on_device()) {
    host_start_[p] = std::chrono::steady_clock::now();
    return;
  }
  intervals_.push_back({p, record_on(device_), nullptr});
}

void PhaseTimer::stop(Phase p) {
  if (!on_device()) {
    host_ms_[p] +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_start_[p])
            .count();
    return;
  }
  ZT_CHECK(!intervals_.empty() && intervals_.back().phase == p && !intervals_.back().end,
           "phase timer: stop without its start");
  intervals_.back().end = record_on(device_);
}

std::array<double, PhaseTimer::kPhases> PhaseTimer::take() {
  std::array<double, kPhases> out = host_ms_;
  host_ms_ = {};
  for (const Interval& i : intervals_) {
    if (!i.end) continue;  // an interval still open (an exception left it): not counted
    i.end->synchronize();
    out[i.phase] += i.begin->elapsedTime(*i.end);
  }
  intervals_.clear();
  return out;
}

}  // namespace zt::profile
