#pragma once
// Adam / AdamW on a flat shard with ATen ops per group: works on any device LibTorch supports and
// mirrors torch::optim::Adam / AdamW operation by operation (it is the reference the fused
// optimizers are tested against). About 10 passes over memory per step; CpuAdam and FusedAdam
// are the fast paths.
//
// State (flat, laid out like master, fp32, master's device):
//   "exp_avg"     m, first moment
//   "exp_avg_sq"  v, second moment

#include "optim/shard_optimizer.h"

namespace zt::optim {

class Adam : public ShardOptimizer {
 public:
  // decoupled: AdamW (p *= 1 - lr * wd) when true, Adam with L2 (g += wd * p) when false.
  explicit Adam(bool decoupled) : decoupled_(decoupled) {}

  void step(at::Tensor& master, const at::Tensor& grad, const std::vector<GroupRange>& groups,
            at::Tensor* half_out = nullptr) override;
  void init(int64_t numel, const at::TensorOptions& options) override;
  int64_t state_bytes() const override;
  std::map<std::string, at::Tensor> state_dict() const override;
  void load_state_dict(const std::map<std::string, at::Tensor>& state) override;
  // Steps exp_avg and exp_avg_sq where they lie (a master store's chunk views) when both are
  // contiguous fp32 of one size (ShardOptimizer::adopt_moments).
  bool adopt_state(const std::map<std::string, at::Tensor>& state) override {
    return adopt_moments(state, &exp_avg_, &exp_avg_sq_);
  }
  std::string name() const override { return decoupled_ ? "AdamW" : "Adam"; }

 private:
  bool decoupled_;
  at::Tensor exp_avg_;     // flat fp32, numel of master
  at::Tensor exp_avg_sq_;  // flat fp32, numel of master
};

}  // namespace zt::optim
