#include "optim/adam.h"

#include <cmath>

#include <ATen/ATen.h>

#include "base/error.h"

namespace zt::optim {

void Adam::init(int64_t numel, const at::TensorOptions& options) {
  exp_avg_ = at::zeros({numel}, options.dtype(at::kFloat));
  exp_avg_sq_ = at::zeros({numel}, options.dtype(at::kFloat));
}

void Adam::step(at::Tensor& master, const at::Tensor& grad, const std::vector<GroupRange>& groups,
                at::Tensor* half_out) {
  check_step_args(master, grad, groups, half_out);
  if (!exp_avg_.defined()) init(master.numel(), master.options());
  ZT_CHECK(exp_avg_.numel() == master.numel(), name(), ": state has ", exp_avg_.numel(),
           " elements but master ", master.numel(), " (shard size changed?)");
  ++step_count_;
  const double t = static_cast<double>(step_count_);
  for (const GroupRange& g : groups) {
    const int64_t n = g.end - g.begin;
    if (n == 0) continue;
    const GroupHyper& h = g.hyper;
    at::Tensor p = master.narrow(0, g.begin, n);
    at::Tensor d = scaled_grad(grad.narrow(0, g.begin, n), h.grad_scale);
    at::Tensor m = exp_avg_.narrow(0, g.begin, n);
    at::Tensor v = exp_avg_sq_.narrow(0, g.begin, n);
    if (decoupled_) {
      p.mul_(1 - h.lr * h.weight_decay);
    } else if (h.weight_decay != 0) {
      d = d.add(p, h.weight_decay);
    }
    const double bias_correction1 = 1 - std::pow(h.beta1, t);
    const double bias_correction2 = 1 - std::pow(h.beta2, t);
    m.mul_(h.beta1).add_(d, 1 - h.beta1);
    v.mul_(h.beta2).addcmul_(d, d, 1 - h.beta2);
    at::Tensor denom = (v.sqrt() / std::sqrt(bias_correction2)).add_(h.eps);
    p.addcdiv_(m, denom, -h.lr / bias_correction1);
    if (half_out) half_out->narrow(0, g.begin, n).copy_(p);
  }
}

int64_t Adam::state_bytes() const {
  return exp_avg_.defined() ? 2 * exp_avg_.numel() * static_cast<int64_t>(sizeof(float)) : 0;
}

std::map<std::string, at::Tensor> Adam::state_dict() const {
  std::map<std::string, at::Tensor> s{{"step", step_tensor()}};
  if (exp_avg_.defined()) {
    s["exp_avg"] = exp_avg_;
    s["exp_avg_sq"] = exp_avg_sq_;
  }
  return s;
}

void Adam::load_state_dict(const std::map<std::string, at::Tensor>& state) {
  load_step(state);
  if (state.count("exp_avg") == 0) {  // saved before the first step
    exp_avg_ = exp_avg_sq_ = at::Tensor();
    return;
  }
  at::Tensor m = state_entry(state, "exp_avg", -1, name());
  at::Tensor v = state_entry(state, "exp_avg_sq", m.numel(), name());
  exp_avg_ = m.to(at::kFloat).contiguous().clone();
  exp_avg_sq_ = v.to(at::kFloat).contiguous().clone();
}

}  // namespace zt::optim
