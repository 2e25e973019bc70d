#pragma once
// Time a rank spends blocked in Work::wait(): communication that was not hidden behind
// computation (gradient reductions, parameter gathers and publishes, norm and overflow votes).

#include <chrono>

#include "parallel/communicator.h"

namespace zt::zero {

class WaitClock {
 public:
  void wait(const dist::WorkPtr& work) {
    const auto start = std::chrono::steady_clock::now();
    work->wait();
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  double seconds() const { return seconds_; }
  void reset() { seconds_ = 0; }

 private:
  double seconds_ = 0;
};

}  // namespace zt::zero
