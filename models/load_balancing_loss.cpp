#include "models/load_balancing_loss.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "base/error.h"
#include "core/activations/activation_checkpoint.h"

namespace zt::models {

namespace {

// Where the loss's backward leaves the gradient it received (its scale: the engine's
// 1/accumulation, an fp16 loss scale), for the layers that run again later in the same backward.
struct ScaleSlot : torch::CustomClassHolder {
  at::Tensor scale;
};

// The identity on the loss, whose backward records the incoming gradient in the slot. `anchor`
// (a scalar that requires grad) gives the node a place in the graph when the loss itself has no
// gradient (every routed layer checkpointed).
class RecordScale : public torch::autograd::Function<RecordScale> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& loss,
                            const at::Tensor& anchor, c10::IValue slot) {
    ctx->saved_data["slot"] = slot;
    (void)anchor;
    return loss.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* slot = static_cast<ScaleSlot*>(ctx->saved_data["slot"].toCapsule().get());
    slot->scale = grads[0].detach();
    return {grads[0], at::zeros_like(grads[0]), at::Tensor()};
  }
};

}  // namespace

void RouterStats::begin_forward(const at::Tensor& token_mask) {
  mask_ = token_mask.defined() ? token_mask.reshape({-1}).to(at::kFloat) : at::Tensor();
  assigned_ = prob_ = rows_ = at::Tensor();
  grad_coef_ = grad_mask_ = at::Tensor();
  scale_slot_ = c10::IValue();
}

at::Tensor RouterStats::probability_sum(const at::Tensor& probs, const at::Tensor& mask) const {
  return mask.defined() ? (probs.to(at::kFloat) * mask.to(probs.device()).unsqueeze(-1)).sum(0)
                        : probs.to(at::kFloat).sum(0);
}

void RouterStats::add(const at::Tensor& router_logits, int64_t k) {
  if (!recording_) return;
  // transformers takes the softmax again here, in the logits' dtype, and its top-k of that.
  const at::Tensor probs = at::softmax(router_logits, -1);
  if (in_checkpoint_recompute()) {
    // A checkpointed layer running again in backward: the statistics were counted in its first
    // pass; now its probabilities get the gradient the loss gives them (none when this forward's
    // loss was not asked for).
    if (!scale_slot_.isCapsule()) return;
    auto* slot = static_cast<ScaleSlot*>(scale_slot_.toCapsule().get());
    ZT_INTERNAL_ASSERT(grad_coef_.defined() && slot->scale.defined(),
                       "router stats: a layer runs again before the load-balancing loss's "
                       "backward");
    add_recompute_loss((probability_sum(probs, grad_mask_) * grad_coef_.to(probs.device())).sum() *
                       slot->scale.to(probs.device()));
    return;
  }
  const int64_t n = router_logits.size(0), e = router_logits.size(1);
  const at::Tensor chosen = std::get<1>(at::topk(probs, k, -1));
  ZT_INTERNAL_ASSERT(!mask_.defined() || mask_.numel() == n, "router stats: mask of ",
                     mask_.numel(), " tokens for ", n, " router rows");
  at::Tensor assigned = at::zeros({e}, probs.options().dtype(at::kFloat));
  at::Tensor rows;
  {
    at::NoGradGuard no_grad;
    const at::Tensor weight = mask_.defined()
                                  ? mask_.to(probs.device()).repeat_interleave(k)
                                  : at::ones({n * k}, probs.options().dtype(at::kFloat));
    assigned.scatter_add_(0, chosen.reshape({-1}), weight);
    rows = mask_.defined() ? mask_.to(probs.device()).sum()
                           : at::full({}, static_cast<double>(n), assigned.options());
  }
  const at::Tensor prob = probability_sum(probs, mask_);
  assigned_ = assigned_.defined() ? assigned_ + assigned : assigned;
  prob_ = prob_.defined() ? prob_ + prob : prob;
  rows_ = rows_.defined() ? rows_ + rows : rows;
}

at::Tensor RouterStats::loss(double scale, dist::Communicator* group) {
  ZT_INTERNAL_ASSERT(!empty(), "router stats: no routed layer ran");
  const int64_t e = prob_.size(0);
  at::Tensor assigned = assigned_, rows = rows_;
  if (group != nullptr) {
    // One all-reduce of [assigned (E), rows]: the whole batch's counts.
    at::Tensor counts = at::cat({assigned_, rows_.reshape({1})}).to(group->device());
    group->all_reduce(counts)->wait();
    counts = counts.to(prob_.device());
    assigned = counts.narrow(0, 0, e);
    rows = counts[e];
  }
  // loss = scale * E * sum_e (assigned_e / rows) (prob_e / rows): linear in prob.
  grad_coef_ = (assigned / (rows * rows) * (scale * static_cast<double>(e))).detach();
  grad_mask_ = mask_;
  const at::Tensor loss = (prob_ * grad_coef_).sum();
  if (!at::GradMode::is_enabled()) return loss;
  // Layers that ran under reentrant checkpointing add their part when they run again, scaled by
  // what reaches this loss in backward (recorded first: this node is the newest of the graph).
  auto slot = c10::make_intrusive<ScaleSlot>();
  scale_slot_ = c10::IValue::make_capsule(slot);
  if (!anchor_.defined() || anchor_.device() != loss.device()) {
    anchor_ = at::zeros({}, loss.options()).requires_grad_(true);
  }
  return RecordScale::apply(loss, anchor_, scale_slot_);
}

}  // namespace zt::models
