#include "parallel/staging_communicator.h"

#include <functional>
#include <utility>

#include <ATen/ATen.h>

#include "base/error.h"

namespace zt::dist {
namespace {

// The inner collective's work, then the copy of its host result back to the device, once.
class StagedWork : public Work {
 public:
  StagedWork(WorkPtr inner, std::function<void()> finish)
      : inner_(std::move(inner)), finish_(std::move(finish)) {}
  void wait(std::chrono::milliseconds timeout) override {
    inner_->wait(timeout);
    if (finish_) {
      auto f = std::move(finish_);
      finish_ = nullptr;
      f();
    }
  }
  bool is_completed() override { return inner_->is_completed(); }

 private:
  WorkPtr inner_;
  std::function<void()> finish_;
};

at::Tensor to_host(const at::Tensor& t) {
  return t.to(at::kCPU).contiguous();
}

}  // namespace

StagingCommunicator::StagingCommunicator(std::shared_ptr<Communicator> inner, c10::Device device)
    : inner_(std::move(inner)), device_(device) {
  ZT_CHECK(inner_ != nullptr, "StagingCommunicator: no inner communicator");
  ZT_CHECK(inner_->device().is_cpu(), "StagingCommunicator stages through the host, but ",
           inner_->backend(), " takes tensors on ", inner_->device());
  ZT_CHECK(!device_.is_cpu(), "StagingCommunicator is for an accelerator, got ", device_);
}

void StagingCommunicator::check_on_device(const char* op, const char* what,
                                          const at::Tensor& t) const {
  ZT_CHECK(t.defined() && t.device() == device_, backend(), " over ", device_, ": ", op, " got ",
           what, " on ", t.defined() ? t.device().str() : std::string("(undefined)"),
           "; every tensor of a collective must be on ", device_);
}

WorkPtr StagingCommunicator::all_reduce(at::Tensor& t, ReduceOp op) {
  check_on_device("all_reduce", "its tensor", t);
  at::Tensor h = to_host(t);
  WorkPtr w = inner_->all_reduce(h, op);
  return std::make_shared<StagedWork>(std::move(w), [t, h]() mutable { t.copy_(h); });
}

WorkPtr StagingCommunicator::reduce_scatter(const at::Tensor& input, at::Tensor& output,
                                            ReduceOp op) {
  check_on_device("reduce_scatter", "its input", input);
  check_on_device("reduce_scatter", "its output", output);
  at::Tensor hi = to_host(input);
  at::Tensor ho = at::empty(output.sizes(), output.options().device(at::kCPU));
  WorkPtr w = inner_->reduce_scatter(hi, ho, op);
  return std::make_shared<StagedWork>(std::move(w),
                                      [output, ho, hi]() mutable { output.copy_(ho); });
}

WorkPtr StagingCommunicator::all_gather(const at::Tensor& input, at::Tensor& output) {
  check_on_device("all_gather", "its input", input);
  check_on_device("all_gather", "its output", output);
  // The input may be output's own slice (ZeRO's in-place publish): it is read now, before the
  // result is written back.
  at::Tensor hi = to_host(input);
  at::Tensor ho = at::empty(output.sizes(), output.options().device(at::kCPU));
  WorkPtr w = inner_->all_gather(hi, ho);
  return std::make_shared<StagedWork>(std::move(w),
                                      [output, ho, hi]() mutable { output.copy_(ho); });
}

WorkPtr StagingCommunicator::all_to_all(const at::Tensor& input, at::Tensor& output) {
  check_on_device("all_to_all", "its input", input);
  check_on_device("all_to_all", "its output", output);
  at::Tensor hi = to_host(input);
  at::Tensor ho = at::empty(output.sizes(), output.options().device(at::kCPU));
  WorkPtr w = inner_->all_to_all(hi, ho);
  return std::make_shared<StagedWork>(std::move(w),
                                      [output, ho, hi]() mutable { output.copy_(ho); });
}

WorkPtr StagingCommunicator::broadcast(at::Tensor& t, int root) {
  check_on_device("broadcast", "its tensor", t);
  at::Tensor h = to_host(t);
  WorkPtr w = inner_->broadcast(h, root);
  return std::make_shared<StagedWork>(std::move(w), [t, h]() mutable { t.copy_(h); });
}

WorkPtr StagingCommunicator::barrier() {
  return inner_->barrier();
}

std::shared_ptr<Communicator> StagingCommunicator::split(const std::vector<int>& ranks) {
  std::shared_ptr<Communicator> sub = inner_->split(ranks);
  if (sub == nullptr) return nullptr;
  return std::make_shared<StagingCommunicator>(std::move(sub), device_);
}

}  // namespace zt::dist
