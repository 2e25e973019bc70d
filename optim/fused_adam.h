#pragma once
// FusedAdam: Adam/AdamW on a CUDA flat shard in one kernel launch per step (up to
// kFusedAdamMaxGroups groups per launch, more in further launches): each element reads param,
// grad, m, v and writes param, m, v and optionally the fp16/bf16 copy, like CpuAdam.
//
// The kernel lives in the CUDA plugin (libzt_cuda.so: optim/fused_adam.cu and
// optim/fused_adam_cuda.cpp), which zt_optim must not link (zt_core loads the plugin, and
// zt_core depends on zt_optim). So the plugin exports the extern "C" launcher below, and
// FusedAdam takes it as a function pointer: OptimizerSpec::cuda_launcher, normally
//   spec.cuda_launcher = zt::cuda::require_symbol(kFusedAdamSymbol, "fused Adam");
// or, when that is null, dlsym(RTLD_DEFAULT, kFusedAdamSymbol) at the first step, which finds it
// once zt_core has dlopen'ed the plugin (it does so with RTLD_GLOBAL).
//
// Arithmetic: adam_formula.h's fused update (the rounding of CpuAdam's AVX2/AVX-512 builds), with
// the constants of adam_constants().
//
// State: "exp_avg", "exp_avg_sq" fp32 [N] on master's device, laid out like master (as Adam's).

#include "optim/fused_adam_launch.h"
#include "optim/shard_optimizer.h"

namespace zt::optim {

// The launches of one step, built on the host without CUDA (so tests run it anywhere): the
// non-empty groups in order, kFusedAdamMaxGroups per launch, constants from adam_constants() of
// step t. Tensor pointers and half_kind are left for step() to fill.
std::vector<FusedAdamLaunch> fused_adam_launches(const std::vector<GroupRange>& groups,
                                                 bool adamw_mode, int64_t t);

class FusedAdam : public ShardOptimizer {
 public:
  explicit FusedAdam(const OptimizerSpec& spec);

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
  std::string name() const override { return "FusedAdam"; }

 private:
  bool adamw_mode_;
  FusedAdamLauncher launcher_;
  at::Tensor exp_avg_;
  at::Tensor exp_avg_sq_;
};

}  // namespace zt::optim
