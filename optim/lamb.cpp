#include "optim/lamb.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>

#include "base/error.h"

namespace zt::optim {
namespace {

bool same_hyper(const GroupHyper& a, const GroupHyper& b) {
  return a.lr == b.lr && a.weight_decay == b.weight_decay && a.beta1 == b.beta1 &&
         a.beta2 == b.beta2 && a.eps == b.eps && a.grad_scale == b.grad_scale;
}

}  // namespace

Lamb::Lamb(const OptimizerSpec& spec)
    : max_coeff_(spec.max_coeff),
      min_coeff_(spec.min_coeff),
      eps_inside_sqrt_(spec.eps_inside_sqrt),
      bias_correction_(spec.bias_correction) {
  ZT_CHECK(min_coeff_ >= 0 && max_coeff_ >= min_coeff_,
           "Lamb: need 0 <= min_coeff <= max_coeff, got min_coeff ", min_coeff_, ", max_coeff ",
           max_coeff_);
}

void Lamb::init(int64_t numel, const at::TensorOptions& options) {
  exp_avg_ = at::zeros({numel}, options.dtype(at::kFloat));
  exp_avg_sq_ = at::zeros({numel}, options.dtype(at::kFloat));
}

void Lamb::step(at::Tensor& master, const at::Tensor& grad, const std::vector<GroupRange>& groups,
                at::Tensor* half_out) {
  check_step_args(master, grad, groups, half_out);
  if (!exp_avg_.defined()) init(master.numel(), master.options());
  ZT_CHECK(exp_avg_.numel() == master.numel(), "Lamb: state has ", exp_avg_.numel(),
           " elements but master ", master.numel());
  ++step_count_;
  const double t = static_cast<double>(step_count_);
  last_coeffs_.clear();
  std::vector<bool> done(groups.size(), false);
  for (size_t first = 0; first < groups.size(); ++first) {
    if (done[first]) continue;
    const GroupHyper& h = groups[first].hyper;
    // Pass 1 over the group's ranges: moments, update, and the two squared norms.
    std::vector<size_t> members;
    std::vector<at::Tensor> updates;
    double w_sq = 0, u_sq = 0;
    for (size_t i = first; i < groups.size(); ++i) {
      if (done[i] || !same_hyper(groups[i].hyper, h)) continue;
      done[i] = true;
      const int64_t n = groups[i].end - groups[i].begin;
      if (n == 0) continue;
      at::Tensor p = master.narrow(0, groups[i].begin, n);
      at::Tensor g = scaled_grad(grad.narrow(0, groups[i].begin, n), h.grad_scale);
      at::Tensor m = exp_avg_.narrow(0, groups[i].begin, n);
      at::Tensor v = exp_avg_sq_.narrow(0, groups[i].begin, n);
      m.mul_(h.beta1).add_(g, 1 - h.beta1);
      v.mul_(h.beta2).addcmul_(g, g, 1 - h.beta2);
      at::Tensor denom = eps_inside_sqrt_ ? v.add(h.eps).sqrt_() : v.sqrt().add_(h.eps);
      at::Tensor u = m.div(denom);
      if (h.weight_decay != 0) u.add_(p, h.weight_decay);
      w_sq += p.square().sum().item<double>();
      u_sq += u.square().sum().item<double>();
      members.push_back(i);
      updates.push_back(u);
    }
    const double w = std::sqrt(w_sq), u = std::sqrt(u_sq);
    double coeff = 1.0;
    if (w != 0 && u != 0) coeff = std::clamp(w / u, min_coeff_, max_coeff_);
    last_coeffs_.push_back(coeff);
    const double step_size =
        bias_correction_ ? h.lr * std::sqrt(1 - std::pow(h.beta2, t)) / (1 - std::pow(h.beta1, t))
                         : h.lr;
    // Pass 2: apply.
    for (size_t k = 0; k < members.size(); ++k) {
      const GroupRange& r = groups[members[k]];
      at::Tensor p = master.narrow(0, r.begin, r.end - r.begin);
      p.add_(updates[k], -step_size * coeff);
      if (half_out) half_out->narrow(0, r.begin, r.end - r.begin).copy_(p);
    }
  }
}

int64_t Lamb::state_bytes() const {
  return exp_avg_.defined() ? (exp_avg_.numel() + exp_avg_sq_.numel()) * 4 : 0;
}

std::map<std::string, at::Tensor> Lamb::state_dict() const {
  return moments_state_dict(exp_avg_, exp_avg_sq_);
}

void Lamb::load_state_dict(const std::map<std::string, at::Tensor>& state) {
  load_moments_state_dict(state, &exp_avg_, &exp_avg_sq_);
}

}  // namespace zt::optim
