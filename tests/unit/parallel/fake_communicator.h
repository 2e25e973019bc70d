#pragma once
// A backend for the recording communicator's tests: its collectives complete at once, except the
// ones from call `hang_from` on, whose wait raises the timeout error the real backends raise.

#include <memory>
#include <string>

#include "base/error.h"
#include "parallel/communicator.h"

namespace zt::dist::fake {

class FakeWork : public Work {
 public:
  explicit FakeWork(bool hangs) : hangs_(hangs) {}
  void wait(std::chrono::milliseconds) override {
    if (hangs_) ZT_THROW_KIND(ErrorKind::kTimeout, "fake all_gather #2 timed out");
  }
  bool is_completed() override { return !hangs_; }

 private:
  bool hangs_;
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

 private:
  WorkPtr next() { return std::make_shared<FakeWork>(++calls_ >= hang_from); }
  std::string name_ = "fake";
  int calls_ = 0;
};

}  // namespace zt::dist::fake
