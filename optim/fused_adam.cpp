#include "optim/fused_adam.h"

#include <dlfcn.h>

#include <ATen/ATen.h>

#include "base/error.h"

namespace zt::optim {

std::vector<FusedAdamLaunch> fused_adam_launches(const std::vector<GroupRange>& groups,
                                                 bool adamw_mode, int64_t t) {
  std::vector<FusedAdamLaunch> launches;
  for (const GroupRange& g : groups) {
    if (g.begin == g.end) continue;
    if (launches.empty() || launches.back().num_groups == kFusedAdamMaxGroups) {
      launches.emplace_back();  // value-initialised: null pointers, no half copy, no groups
    }
    FusedAdamLaunch& launch = launches.back();
    launch.groups[launch.num_groups++] = {g.begin, g.end, adam_constants(g.hyper, adamw_mode, t)};
  }
  return launches;
}

FusedAdam::FusedAdam(const OptimizerSpec& spec)
    : adamw_mode_(spec.adamw_mode),
      launcher_(reinterpret_cast<FusedAdamLauncher>(spec.cuda_launcher)) {}

void FusedAdam::init(int64_t numel, const at::TensorOptions& options) {
  exp_avg_ = at::zeros({numel}, options.dtype(at::kFloat));
  exp_avg_sq_ = at::zeros({numel}, options.dtype(at::kFloat));
}

void FusedAdam::step(at::Tensor& master, const at::Tensor& grad,
                     const std::vector<GroupRange>& groups, at::Tensor* half_out) {
  check_step_args(master, grad, groups, half_out);
  ZT_CHECK(master.is_cuda(), "FusedAdam: master must be a CUDA tensor, got ", master.device());
  if (launcher_ == nullptr) {
    launcher_ = reinterpret_cast<FusedAdamLauncher>(dlsym(RTLD_DEFAULT, kFusedAdamSymbol));
    ZT_CHECK(launcher_ != nullptr, "FusedAdam needs the CUDA plugin's ", kFusedAdamSymbol,
             ": pass OptimizerSpec::cuda_launcher or load the plugin first (zt::cuda::kernels())");
  }
  if (!exp_avg_.defined()) init(master.numel(), master.options());
  ZT_CHECK(exp_avg_.numel() == master.numel(), "FusedAdam: state has ", exp_avg_.numel(),
           " elements but master ", master.numel());
  if (exp_avg_.device() != master.device()) {  // loaded from a checkpoint on the host
    exp_avg_ = exp_avg_.to(master.device());
    exp_avg_sq_ = exp_avg_sq_.to(master.device());
  }
  ++step_count_;
  for (FusedAdamLaunch& launch : fused_adam_launches(groups, adamw_mode_, step_count_)) {
    launch.param = master.data_ptr<float>();
    launch.grad = grad.data_ptr<float>();
    launch.exp_avg = exp_avg_.data_ptr<float>();
    launch.exp_avg_sq = exp_avg_sq_.data_ptr<float>();
    if (half_out) {
      launch.half_out = half_out->data_ptr();
      launch.half_kind = half_out->scalar_type() == at::kHalf ? 1 : 2;
    }
    const char* err = launcher_(&launch, nullptr);
    ZT_CHECK(err == nullptr, "FusedAdam kernel launch failed: ", err);
  }
}

int64_t FusedAdam::state_bytes() const {
  return exp_avg_.defined() ? 8 * exp_avg_.numel() : 0;
}

std::map<std::string, at::Tensor> FusedAdam::state_dict() const {
  return moments_state_dict(exp_avg_, exp_avg_sq_);
}

// The moments stay on the device they come on; step() moves them to master's.
void FusedAdam::load_state_dict(const std::map<std::string, at::Tensor>& state) {
  load_moments_state_dict(state, &exp_avg_, &exp_avg_sq_);
}

}  // namespace zt::optim
