#include "core/zero/grad_sync.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

namespace zt::zero {

// Runs after autograd has accumulated a parameter's gradient of this backward.
class GradSync::Hook : public torch::autograd::PostAccumulateGradHook {
 public:
  Hook(GradSync* sync, size_t bucket, size_t entry) : sync_(sync), bucket_(bucket), entry_(entry) {}
  void operator()(const torch::autograd::Variable& param) override {
    sync_->on_grad_ready(bucket_, entry_, param);
  }

 private:
  GradSync* sync_;
  size_t bucket_, entry_;
};

GradSync::GradSync(std::vector<std::unique_ptr<Bucket>>& buckets, dist::Communicator& comm,
                   WaitClock& clock, int64_t max_inflight, std::function<void(size_t)> on_complete,
                   std::function<void(size_t)> on_reduced, size_t root_unit)
    : buckets_(buckets),
      comm_(comm),
      clock_(clock),
      max_inflight_(static_cast<size_t>(std::max<int64_t>(1, max_inflight))),
      on_complete_(std::move(on_complete)),
      on_reduced_(std::move(on_reduced)) {
  // Backward meets the declared units last to first and the root's embeddings at the end; the
  // root's head, which completes first, is guessed too late (its one staging buffer waits),
  // until learn_order corrects it.
  std::vector<std::vector<size_t>> by_unit;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const size_t u = buckets_[b]->unit();
    if (by_unit.size() <= u) by_unit.resize(u + 1);
    by_unit[u].push_back(b);
  }
  for (size_t u = by_unit.size(); u-- > 0;) {
    if (u != root_unit) order_.insert(order_.end(), by_unit[u].begin(), by_unit[u].end());
  }
  if (root_unit < by_unit.size()) {
    order_.insert(order_.end(), by_unit[root_unit].begin(), by_unit[root_unit].end());
  }
  ready_.assign(buckets_.size(), false);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const auto& entries = buckets_[b]->layout().entries();
    for (size_t e = 0; e < entries.size(); ++e) {
      torch::autograd::impl::set_post_acc_grad_hooks(entries[e].param,
                                                     std::make_unique<Hook>(this, b, e));
    }
  }
}

GradSync::~GradSync() {
  for (auto& b : buckets_) {
    for (const auto& e : b->layout().entries()) {
      torch::autograd::impl::set_post_acc_grad_hooks(e.param, nullptr);
    }
  }
}

void GradSync::begin_backward(bool reduce) {
  reduce_ = reduce;
}

void GradSync::on_grad_ready(size_t b, size_t entry, const at::Tensor& param) {
  at::NoGradGuard no_grad;
  const bool complete = buckets_[b]->add_grad(entry, param.grad());
  // The gradient now lives in the bucket; drop autograd's copy.
  param.mutable_grad() = at::Tensor();
  if (complete) on_bucket_complete(b);
}

void GradSync::on_bucket_complete(size_t b) {
  if (on_complete_) on_complete_(b);
  completed_.push_back(b);
  ready_[b] = true;
  if (reduce_) launch_ready();
}

void GradSync::launch_ready() {
  while (next_ < order_.size() && ready_[order_[next_]]) {
    const size_t b = order_[next_++];
    buckets_[b]->start_grad_sync(comm_);
    inflight_.push_back(b);
    while (inflight_.size() > max_inflight_) {
      finish_reduction(inflight_.front());
      inflight_.pop_front();
    }
  }
}

void GradSync::finish_reduction(size_t b) {
  buckets_[b]->finish_grad_sync(clock_);
  if (on_reduced_) on_reduced_(b);
}

void GradSync::finish_backward() {
  at::NoGradGuard no_grad;
  for (size_t b : order_) {
    if (!buckets_[b]->complete()) {
      buckets_[b]->force_complete();
      on_bucket_complete(b);
    }
  }
  for (size_t b : inflight_) finish_reduction(b);
  inflight_.clear();
  if (!order_learned_) learn_order();
  completed_.clear();
  ready_.assign(buckets_.size(), false);
  next_ = 0;
  for (auto& b : buckets_) b->next_micro_step();
}

void GradSync::learn_order() {
  order_learned_ = true;
  if (comm_.size() == 1) {
    order_ = completed_;
    return;
  }
  // Every rank reaches the end of its first backward, so this one broadcast is matched.
  at::Tensor order = at::tensor(std::vector<int64_t>(completed_.begin(), completed_.end()),
                                at::TensorOptions().dtype(at::kLong))
                         .to(comm_.device());
  comm_.broadcast(order, 0)->wait();
  order = order.cpu();
  for (size_t i = 0; i < order_.size(); ++i)
    order_[i] = static_cast<size_t>(order[i].item<int64_t>());
}

}  // namespace zt::zero
