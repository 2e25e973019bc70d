#pragma once
// The times of the engine's phases (forward, backward, step) for wall_clock_breakdown, measured
// where the work runs, as DeepSpeed's SynchronizedWallClockTimer does. On the host: the host's
// clock. On an accelerator the host only enqueues kernels, so its clock would show how long the
// enqueueing took; there each interval is a pair of timing events recorded on the device's
// current stream, and its length is the stream's time between them (kernels, and the stream
// idling while it waits for the host: an offloaded optimizer step counts whole). The events are
// read, waiting for them, only when the times are taken.

#include <array>
#include <chrono>
#include <memory>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/Event.h>

namespace zt::profile {

class PhaseTimer {
 public:
  enum Phase { kForward = 0, kBackward = 1, kStep = 2 };
  static constexpr size_t kPhases = 3;

  // `device`: where the model computes (the host clock for the CPU).
  explicit PhaseTimer(c10::Device device);
  ~PhaseTimer();

  void start(Phase p);
  void stop(Phase p);
  // Milliseconds spent in each phase since the last take() (or construction), by phase;
  // waits for the device to reach the last interval's end.
  std::array<double, kPhases> take();
  // Whether the intervals are timed on the device (an accelerator) rather than the host.
  bool on_device() const { return device_.type() != c10::DeviceType::CPU; }

 private:
  struct Interval {
    Phase phase;
    std::unique_ptr<c10::Event> begin, end;
  };
  c10::Device device_;
  std::array<std::chrono::steady_clock::time_point, kPhases> host_start_{};
  std::array<double, kPhases> host_ms_{};
  std::vector<Interval> intervals_;  // on a device: those since the last take()
};

}  // namespace zt::profile
