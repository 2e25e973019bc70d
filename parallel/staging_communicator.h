#pragma once
// StagingCommunicator: collectives on tensors of an accelerator that has no collective library of
// its own in this build (the host-backed test device, testdevice/test_device.h; any other
// PrivateUse1 backend), over a host backend (gloo or MPI):
//
//   all_reduce(t on dev)  →  h = t.to(cpu)  →  inner.all_reduce(h)  →  wait(): t.copy_(h)
//
// Like NCCL, it takes only tensors on its own device: a host tensor, or one on another device
// index, is a zt::Error naming the operation and both devices, so a placement bug that a CPU run
// cannot show (there the model's device and the host are one device) fails here as it would on a
// GPU. Outputs are written back only when wait() returns, the contract every communicator has
// (communicator.h). split() wraps the inner communicator's subgroup the same way.

#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace zt::dist {

class StagingCommunicator : public Communicator {
 public:
  // inner: a host backend (its device() is the CPU); device: where the engine's tensors live.
  StagingCommunicator(std::shared_ptr<Communicator> inner, c10::Device device);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& backend() const override { return inner_->backend(); }
  c10::Device device() const override { return device_; }

  WorkPtr all_reduce(at::Tensor& t, ReduceOp op = ReduceOp::kSum) override;
  WorkPtr reduce_scatter(const at::Tensor& input, at::Tensor& output,
                         ReduceOp op = ReduceOp::kSum) override;
  WorkPtr all_gather(const at::Tensor& input, at::Tensor& output) override;
  WorkPtr all_to_all(const at::Tensor& input, at::Tensor& output) override;
  WorkPtr broadcast(at::Tensor& t, int root) override;
  WorkPtr barrier() override;
  std::shared_ptr<Communicator> split(const std::vector<int>& ranks) override;

  const std::shared_ptr<Communicator>& inner() const { return inner_; }

 private:
  void check_on_device(const char* op, const char* what, const at::Tensor& t) const;

  std::shared_ptr<Communicator> inner_;
  c10::Device device_;
};

}  // namespace zt::dist
