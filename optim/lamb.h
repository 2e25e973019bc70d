#pragma once
// Lamb: DeepSpeed's FusedLamb (deepspeed/ops/lamb, csrc/lamb/fused_lamb_cuda_kernel.cu) on a flat
// fp32 shard. Per group G of the shard, at step t (t = 1 first):
//
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2                     (every element of G)
//   denom  = sqrt(v) + eps      (eps_inside_sqrt: sqrt(v + eps))
//   update = m / denom + weight_decay * p                              (L2 into the update)
//   coeff  = clamp(||p_G|| / ||update_G||, min_coeff, max_coeff), or 1 when either norm is 0
//   step   = lr * sqrt(1 - b2^t) / (1 - b1^t)   (bias_correction false: lr)
//   p -= step * coeff * update
//
// The norms run over the group's elements on this rank, as DeepSpeed's FusedLamb computes them
// under ZeRO, where each parameter group is one flat fp32 partition per rank: so the trust ratio
// is per (group, rank), not per parameter tensor, and depends on how the shard is cut. Ranges of
// one step with equal hyper-parameters form one group (shard_group_ranges gives each group's
// pieces the same GroupHyper).
//
// State: "exp_avg" (m) and "exp_avg_sq" (v), flat fp32 laid out like master; "step".

#include <map>
#include <string>
#include <vector>

#include "optim/shard_optimizer.h"

namespace zt::optim {

class Lamb : public ShardOptimizer {
 public:
  explicit Lamb(const OptimizerSpec& spec);

  void step(at::Tensor& master, const at::Tensor& grad, const std::vector<GroupRange>& groups,
            at::Tensor* half_out = nullptr) override;
  void init(int64_t numel, const at::TensorOptions& options) override;
  int64_t state_bytes() const override;
  std::map<std::string, at::Tensor> state_dict() const override;
  void load_state_dict(const std::map<std::string, at::Tensor>& state) override;
  std::string name() const override { return "Lamb"; }

  // The trust ratio (clamped) each group used at the last step, in order of first appearance.
  const std::vector<double>& last_coefficients() const { return last_coeffs_; }

 private:
  double max_coeff_;
  double min_coeff_;
  bool eps_inside_sqrt_;
  bool bias_correction_;
  at::Tensor exp_avg_;     // flat fp32, numel of master
  at::Tensor exp_avg_sq_;  // flat fp32, numel of master
  std::vector<double> last_coeffs_;
};

}  // namespace zt::optim
