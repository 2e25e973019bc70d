#pragma once
// Time a rank spends blocked in Work::wait(): communication that was not hidden behind
// computation (gradient reductions, parameter gathers and publishes, norm and overflow votes).

#include <chrono>

#include <ATen/core/Tensor.h>

#include "parallel/communicator.h"

namespace zt::zero {

class WaitClock {
 public:
  void wait(const dist::WorkPtr& work) {
    const auto start = std::chrono::steady_clock::now();
    work->wait();
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  // A collective's result read on the host (a norm, a vote). On a GPU wait() only orders the
  // streams and the read synchronises; a watchdog abort in between leaves garbage in `t`, so the
  // work is asked once more after the read, which raises the communicator's failure.
  template <typename T>
  T read(const dist::WorkPtr& work, const at::Tensor& t) {
    wait(work);
    const T value = t.template item<T>();
    work->is_completed();
    return value;
  }
  double seconds() const { return seconds_; }
  void reset() { seconds_ = 0; }

 private:
  double seconds_ = 0;
};

}  // namespace zt::zero
