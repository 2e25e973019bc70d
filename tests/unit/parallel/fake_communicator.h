#pragma once
// A backend for the recording communicator's tests: its collectives complete at once, except the
// ones from call `hang_from` on, whose wait raises the timeout error the real backends raise, and,
// with stream_ordered, the ones the "device" has not finished (device_done), as under NCCL.

#include <memory>
#include <string>

#include "base/error.h"
#include "parallel/communicator.h"

namespace zt::dist::fake {

class FakeWork : public Work {
 public:
  // device_done: null for a host backend (done once waited); else a stream-ordered backend's
  // (NCCL's) work, whose wait() returns at once and which is done when *device_done is true.
  FakeWork(bool hangs, const bool* device_done) : hangs_(hangs), device_done_(device_done) {}
  void wait(std::chrono::milliseconds) override {
    if (hangs_) ZT_THROW_KIND(ErrorKind::kTimeout, "fake all_gather #2 timed out");
  }
  bool is_completed() override { return !hangs_ && (device_done_ == nullptr || *device_done_); }

 private:
  bool hangs_;
  const bool* device_done_;
};

class FakeComm : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const std::string& backend() const override { return name_; }
  WorkPtr all_reduce(at::Tensor&, ReduceOp) override { return next(); }
  WorkPtr all_gather(const at::Tensor&, at::Tensor&) override { return next(); }
  WorkPtr reduce_scatter(const at::Tensor&, at::Tensor&, ReduceOp) override { return next(); }
  WorkPtr barrier() override { return next(); }
  int hang_from = 1 << 30;
  // Stream-ordered works (as NCCL's): done only once device_done is set.
  bool stream_ordered = false;
  bool device_done = false;

 private:
  WorkPtr next() {
    return std::make_shared<FakeWork>(++calls_ >= hang_from,
                                      stream_ordered ? &device_done : nullptr);
  }
  std::string name_ = "fake";
  int calls_ = 0;
};

}  // namespace zt::dist::fake
