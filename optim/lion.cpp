#include "optim/lion.h"

#include <ATen/ATen.h>

#include "base/error.h"

namespace zt::optim {

void Lion::init(int64_t numel, const at::TensorOptions& options) {
  exp_avg_ = at::zeros({numel}, options.dtype(at::kFloat));
}

void Lion::step(at::Tensor& master, const at::Tensor& grad, const std::vector<GroupRange>& groups,
                at::Tensor* half_out) {
  check_step_args(master, grad, groups, half_out);
  if (!exp_avg_.defined()) init(master.numel(), master.options());
  ZT_CHECK(exp_avg_.numel() == master.numel(), "Lion: state has ", exp_avg_.numel(),
           " elements but master ", master.numel());
  ++step_count_;
  for (const GroupRange& g : groups) {
    const int64_t n = g.end - g.begin;
    if (n == 0) continue;
    const GroupHyper& h = g.hyper;
    at::Tensor p = master.narrow(0, g.begin, n);
    at::Tensor d = scaled_grad(grad.narrow(0, g.begin, n), h.grad_scale);
    at::Tensor m = exp_avg_.narrow(0, g.begin, n);
    at::Tensor c = m.mul(h.beta1).add_(d, 1 - h.beta1);
    p.mul_(1 - h.lr * h.weight_decay);
    p.add_(c.sign_(), -h.lr);
    m.mul_(h.beta2).add_(d, 1 - h.beta2);
    if (half_out) half_out->narrow(0, g.begin, n).copy_(p);
  }
}

int64_t Lion::state_bytes() const {
  return exp_avg_.defined() ? exp_avg_.numel() * 4 : 0;
}

std::map<std::string, at::Tensor> Lion::state_dict() const {
  std::map<std::string, at::Tensor> s{{"step", step_tensor()}};
  if (exp_avg_.defined()) s["exp_avg"] = exp_avg_;
  return s;
}

void Lion::load_state_dict(const std::map<std::string, at::Tensor>& state) {
  load_step(state);
  exp_avg_ = at::Tensor();
  if (state.count("exp_avg")) {
    exp_avg_ = state_entry(state, "exp_avg", -1, name()).to(at::kFloat).contiguous().clone();
  }
}

}  // namespace zt::optim
