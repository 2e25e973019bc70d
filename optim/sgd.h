#pragma once
// SGD with momentum, dampening and Nesterov on a flat shard, ATen ops per group (any device),
// mirroring torch::optim::SGD: weight decay is L2 (added to the gradient); on the first step the
// momentum buffer is the gradient itself (no dampening), as torch does.
//
// State: "momentum_buffer" (flat fp32, laid out like master), allocated at the first step whose
// groups have momentum != 0. Groups with momentum 0 neither read nor write it.

#include "optim/shard_optimizer.h"

namespace zt::optim {

class Sgd : public ShardOptimizer {
 public:
  void step(at::Tensor& master, const at::Tensor& grad, const std::vector<GroupRange>& groups,
            at::Tensor* half_out = nullptr) override;
  void init(int64_t numel, const at::TensorOptions& options) override;
  int64_t state_bytes() const override;
  std::map<std::string, at::Tensor> state_dict() const override;
  void load_state_dict(const std::map<std::string, at::Tensor>& state) override;
  std::string name() const override { return "SGD"; }

 private:
  at::Tensor momentum_buffer_;  // flat fp32, numel of master
  // Whether the buffer holds history; false until the first momentum step (torch's "no state").
  bool buffer_started_ = false;
};

}  // namespace zt::optim
