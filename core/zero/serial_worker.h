#pragma once
// SerialWorker: one background thread that runs the tasks posted to it, in order. The sharded
// step posts each bucket's host optimizer step to it from backward (core/zero/sharded_step.h),
// so that the autograd thread goes on issuing the device's backward while the host steps.
//
// A task's exception is kept and rethrown by the next wait_idle() (the tasks after it still run:
// each bucket's step is independent, and the caller learns of the first failure). The thread
// keeps the intra-op width of the thread that built the worker, so the host's optimizer pass runs
// as wide as it would on the caller.

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace zt::zero {

class SerialWorker {
 public:
  SerialWorker();
  ~SerialWorker();  // runs what was posted, then joins
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  void post(std::function<void()> task);
  // Blocks until every posted task has run; rethrows the first exception one of them threw since
  // the last call.
  void wait_idle();

 private:
  void run(int intra_op_threads);

  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<std::function<void()>> tasks_;
  bool busy_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace zt::zero
