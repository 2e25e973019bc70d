#pragma once
// Lion (Chen et al., "Symbolic Discovery of Optimization Algorithms") on a flat shard, ATen ops
// per group (any device): c = b1 m + (1-b1) g; p *= 1 - lr wd; p -= lr sign(c);
// m = b2 m + (1-b2) g. Uses GroupHyper beta1/beta2 (Lion's usual values are 0.9 and 0.99; the
// caller sets them) and ignores eps. State: "exp_avg" (flat fp32, laid out like master): 4 bytes
// per parameter, half of Adam's.

#include "optim/shard_optimizer.h"

namespace zt::optim {

class Lion : public ShardOptimizer {
 public:
  void step(at::Tensor& master, const at::Tensor& grad, const std::vector<GroupRange>& groups,
            at::Tensor* half_out = nullptr) override;
  void init(int64_t numel, const at::TensorOptions& options) override;
  int64_t state_bytes() const override;
  std::map<std::string, at::Tensor> state_dict() const override;
  void load_state_dict(const std::map<std::string, at::Tensor>& state) override;
  std::string name() const override { return "Lion"; }

 private:
  at::Tensor exp_avg_;  // flat fp32, numel of master
};

}  // namespace zt::optim
