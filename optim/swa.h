#pragma once
// SwaShardOptimizer: stochastic weight averaging of one rank's fp32 master shard (swa_spec.h),
// wrapped around the shard's optimizer, so it happens where the masters live (each rank averages
// its own shard; offloaded masters are averaged on the host) and costs one more fp32 shard:
//
//   swa_model  // flat fp32, numel = master's, laid out like master: the running mean
//   swa_n      // int64 0-d: how many steps' weights it holds
//
// After the wrapped optimizer's step t (1-based), when t > swa_start and t % swa_freq == 0:
//   swa_n += 1;  swa_model += (master - swa_model) / swa_n     (the first average copies master)
// i.e. swa_model is the plain mean of the masters of the averaged steps. Elements outside every
// group (padding, frozen) are constant in master, so the mean leaves them as they are.
//
// Both tensors join the wrapped optimizer's state_dict(), so checkpoints save them, resharding
// rebuilds swa_model like any state laid out like master (core/checkpoint/checkpoint.h), and
// zt::for_each_consolidated(dir, tag, "swa_model", fn) gives the averaged weights for export
// (zt-export-hf --weights swa). name() is the wrapped optimizer's: a checkpoint taken with SWA on
// resumes with it off and the other way round (the average then starts over).

#include <memory>

#include "optim/shard_optimizer.h"
#include "optim/swa_spec.h"

namespace zt::optim {

class SwaShardOptimizer : public ShardOptimizer {
 public:
  SwaShardOptimizer(std::unique_ptr<ShardOptimizer> inner, const SwaSpec& spec);

  void step(at::Tensor& master, const at::Tensor& grad, const std::vector<GroupRange>& groups,
            at::Tensor* half_out = nullptr) override;
  void init(int64_t numel, const at::TensorOptions& options) override;
  int64_t state_bytes() const override;
  // The wrapped optimizer's state, plus "swa_model" and "swa_n" once averaging has begun.
  std::map<std::string, at::Tensor> state_dict() const override;
  void load_state_dict(const std::map<std::string, at::Tensor>& state) override;
  std::string name() const override { return inner_->name(); }

  // The running mean (undefined before the first average) and the number of steps in it.
  const at::Tensor& average() const { return average_; }
  int64_t averaged_steps() const { return n_; }

 private:
  std::unique_ptr<ShardOptimizer> inner_;
  SwaSpec spec_;
  at::Tensor average_;
  int64_t n_ = 0;
};

}  // namespace zt::optim
