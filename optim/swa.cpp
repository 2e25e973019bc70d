#include "optim/swa.h"

#include <ATen/ATen.h>

#include "base/error.h"

namespace zt::optim {

SwaShardOptimizer::SwaShardOptimizer(std::unique_ptr<ShardOptimizer> inner, const SwaSpec& spec)
    : inner_(std::move(inner)), spec_(spec) {
  ZT_CHECK(spec_.swa_start >= 0, "swa.swa_start must be >= 0, got ", spec_.swa_start);
  ZT_CHECK(spec_.swa_freq >= 1, "swa.swa_freq must be >= 1, got ", spec_.swa_freq);
}

void SwaShardOptimizer::step(at::Tensor& master, const at::Tensor& grad,
                             const std::vector<GroupRange>& groups, at::Tensor* half_out) {
  inner_->step(master, grad, groups, half_out);
  step_count_ = inner_->step_count();
  // torchcontrib's automatic mode: average after step t when t > swa_start, t % swa_freq == 0.
  if (step_count_ <= spec_.swa_start || step_count_ % spec_.swa_freq != 0) return;
  if (!average_.defined() || n_ == 0) {
    average_ = master.detach().clone();
    n_ = 1;
    return;
  }
  ++n_;
  average_.add_(master.detach() - average_, 1.0 / static_cast<double>(n_));
}

void SwaShardOptimizer::init(int64_t numel, const at::TensorOptions& options) {
  inner_->init(numel, options);
}

int64_t SwaShardOptimizer::state_bytes() const {
  return inner_->state_bytes() +
         (average_.defined() ? average_.numel() * static_cast<int64_t>(average_.element_size())
                             : 0);
}

std::map<std::string, at::Tensor> SwaShardOptimizer::state_dict() const {
  std::map<std::string, at::Tensor> s = inner_->state_dict();
  if (average_.defined()) {
    s["swa_model"] = average_;
    s["swa_n"] = at::scalar_tensor(n_, at::kLong);
  }
  return s;
}

void SwaShardOptimizer::load_state_dict(const std::map<std::string, at::Tensor>& state) {
  std::map<std::string, at::Tensor> inner = state;
  auto avg = inner.find("swa_model");
  auto n = inner.find("swa_n");
  ZT_CHECK((avg == inner.end()) == (n == inner.end()),
           "SWA state needs both swa_model and swa_n, got one of them");
  if (avg != inner.end()) {
    average_ = avg->second.to(at::kFloat).clone();
    n_ = n->second.item<int64_t>();
    inner.erase("swa_model");
    inner.erase("swa_n");
  } else {
    average_ = at::Tensor();
    n_ = 0;
  }
  inner_->load_state_dict(inner);
  step_count_ = inner_->step_count();
}

}  // namespace zt::optim
