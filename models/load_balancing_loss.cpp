#include "models/load_balancing_loss.h"

#include <ATen/ATen.h>

#include "base/error.h"

namespace zt::models {

void RouterStats::begin_forward(const at::Tensor& token_mask) {
  mask_ = token_mask.defined() ? token_mask.reshape({-1}).to(at::kFloat) : at::Tensor();
  assigned_ = prob_ = rows_ = at::Tensor();
}

void RouterStats::add(const at::Tensor& router_logits, int64_t k) {
  if (!recording_) return;
  const int64_t n = router_logits.size(0), e = router_logits.size(1);
  // transformers takes the softmax again here, in the logits' dtype, and its top-k of that.
  const at::Tensor probs = at::softmax(router_logits, -1);
  const at::Tensor chosen = std::get<1>(at::topk(probs, k, -1));
  at::Tensor assigned = at::zeros({e}, probs.options().dtype(at::kFloat));
  at::Tensor prob, rows;
  {
    at::NoGradGuard no_grad;
    const at::Tensor weight = mask_.defined()
                                  ? mask_.to(probs.device()).repeat_interleave(k)
                                  : at::ones({n * k}, probs.options().dtype(at::kFloat));
    assigned.scatter_add_(0, chosen.reshape({-1}), weight);
    rows = mask_.defined() ? mask_.to(probs.device()).sum()
                           : at::full({}, static_cast<double>(n), assigned.options());
  }
  ZT_INTERNAL_ASSERT(!mask_.defined() || mask_.numel() == n, "router stats: mask of ",
                     mask_.numel(), " tokens for ", n, " router rows");
  prob = mask_.defined() ? (probs.to(at::kFloat) * mask_.to(probs.device()).unsqueeze(-1)).sum(0)
                         : probs.to(at::kFloat).sum(0);
  assigned_ = assigned_.defined() ? assigned_ + assigned : assigned;
  prob_ = prob_.defined() ? prob_ + prob : prob;
  rows_ = rows_.defined() ? rows_ + rows : rows;
}

at::Tensor RouterStats::local_loss() const {
  ZT_INTERNAL_ASSERT(!empty(), "router stats: no routed layer ran");
  const double e = static_cast<double>(prob_.size(0));
  return (assigned_ / rows_ * (prob_ / rows_)).sum() * e;
}

at::Tensor RouterStats::group_share(dist::Communicator& group) const {
  ZT_INTERNAL_ASSERT(!empty(), "router stats: no routed layer ran");
  const int64_t e = prob_.size(0);
  // One all-reduce of [assigned (E), rows]: the whole batch's counts.
  at::Tensor counts = at::cat({assigned_, rows_.reshape({1})}).to(group.device());
  group.all_reduce(counts)->wait();
  counts = counts.to(prob_.device());
  const at::Tensor assigned = counts.narrow(0, 0, e), rows = counts[e];
  return (assigned / rows * (prob_ / rows)).sum() * static_cast<double>(e);
}

}  // namespace zt::models
