#include "optim/sgd.h"

#include <ATen/ATen.h>

#include "base/error.h"

namespace zt::optim {

void Sgd::init(int64_t numel, const at::TensorOptions& options) {
  momentum_buffer_ = at::zeros({numel}, options.dtype(at::kFloat));
}

void Sgd::step(at::Tensor& master, const at::Tensor& grad, const std::vector<GroupRange>& groups,
               at::Tensor* half_out) {
  check_step_args(master, grad, groups, half_out);
  for (const GroupRange& g : groups) {
    ZT_CHECK(!g.hyper.nesterov || (g.hyper.momentum > 0 && g.hyper.dampening == 0),
             "SGD: nesterov needs momentum > 0 and dampening 0, got momentum ", g.hyper.momentum,
             ", dampening ", g.hyper.dampening);
    if (g.hyper.momentum != 0 && !momentum_buffer_.defined()) {
      init(master.numel(), master.options());
    }
  }
  ZT_CHECK(!momentum_buffer_.defined() || momentum_buffer_.numel() == master.numel(),
           "SGD: state has ", momentum_buffer_.numel(), " elements but master ", master.numel());
  ++step_count_;
  bool used_buffer = false;
  for (const GroupRange& g : groups) {
    const int64_t n = g.end - g.begin;
    if (n == 0) continue;
    const GroupHyper& h = g.hyper;
    at::Tensor p = master.narrow(0, g.begin, n);
    at::Tensor d = scaled_grad(grad.narrow(0, g.begin, n), h.grad_scale);
    if (h.weight_decay != 0) d = d.add(p, h.weight_decay);
    if (h.momentum != 0) {
      at::Tensor buf = momentum_buffer_.narrow(0, g.begin, n);
      if (!buffer_started_) {
        buf.copy_(d);
      } else {
        buf.mul_(h.momentum).add_(d, 1 - h.dampening);
      }
      used_buffer = true;
      d = h.nesterov ? d.add(buf, h.momentum) : buf;
    }
    p.add_(d, -h.lr);
    if (half_out) half_out->narrow(0, g.begin, n).copy_(p);
  }
  buffer_started_ = buffer_started_ || used_buffer;
}

int64_t Sgd::state_bytes() const {
  return momentum_buffer_.defined() ? momentum_buffer_.numel() * 4 : 0;
}

std::map<std::string, at::Tensor> Sgd::state_dict() const {
  std::map<std::string, at::Tensor> s{{"step", step_tensor()}};
  if (momentum_buffer_.defined() && buffer_started_) s["momentum_buffer"] = momentum_buffer_;
  return s;
}

void Sgd::load_state_dict(const std::map<std::string, at::Tensor>& state) {
  load_step(state);
  momentum_buffer_ = at::Tensor();
  buffer_started_ = state.count("momentum_buffer") != 0;
  if (buffer_started_) {
    momentum_buffer_ =
        state_entry(state, "momentum_buffer", -1, name()).to(at::kFloat).contiguous().clone();
  }
}

}  // namespace zt::optim
