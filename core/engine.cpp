#include "core/engine.h"

#include <array>
#include <chrono>
#include <map>
#include <string>
#include <tuple>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "base/error.h"
#include "base/logging.h"
#include "core/activations/activation_checkpoint.h"
#include "core/engine_impl.h"
#include "optim/shard_optimizer.h"

namespace zt {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace
Engine::~Engine() = default;

int64_t Engine::global_step() const {
  return impl_->global_step_;
}
int64_t Engine::skipped_steps() const {
  return impl_->skipped_steps_;
}
double Engine::loss_scale() const {
  return impl_->scaler_ ? impl_->scaler_->scale() : 1.0;
}
const DynamicLossScaler* Engine::loss_scaler() const {
  return impl_->scaler_.get();
}
DynamicLossScaler* Engine::mutable_loss_scaler() {
  return impl_->scaler_.get();
}
int64_t Engine::micro_steps() const {
  return impl_->micro_steps_;
}
double Engine::last_grad_norm() const {
  return impl_->last_grad_norm_;
}
const profile::StepFlops* Engine::step_flops() const {
  return impl_->flops_ ? &impl_->flops_->last() : nullptr;
}

double Engine::comm_wait_seconds() const {
  return impl_->clock_.seconds();
}
void Engine::reset_comm_wait() {
  impl_->clock_.reset();
}
std::shared_ptr<torch::nn::Module> Engine::model() const {
  return impl_->model_;
}
bool Engine::is_gradient_accumulation_boundary() const {
  return (impl_->micro_steps_ + 1) % impl_->options_.gradient_accumulation_steps == 0;
}

at::Tensor Engine::forward(const std::function<at::Tensor()>& fn) {
  if (impl_->timer_) impl_->timer_->start(profile::PhaseTimer::kForward);
  begin_checkpointed_forward();  // number_checkpoints counts per forward pass
  const bool counted = impl_->flops_ && at::GradMode::is_enabled();  // evaluation is not
  if (counted) impl_->flops_->begin_forward(impl_->global_step_);
  at::Tensor out;
  {
    profile::ModuleScope model_scope(*impl_->model_);
    impl_->gather_->gather_unit(impl_->gather_->root(), /*wait=*/true);
    out = fn();
  }
  if (counted) impl_->flops_->end_forward();
  if (!(at::GradMode::is_enabled() && out.requires_grad()) && !impl_->gather_->in_scope()) {
    impl_->gather_->release_all();  // evaluation: no backward will follow
  }
  if (impl_->timer_) impl_->timer_->stop(profile::PhaseTimer::kForward);
  return out;
}

void Engine::backward(const at::Tensor& loss, bool scale_wrt_gas) {
  ZT_CHECK(loss.defined() && loss.numel() == 1, "engine.backward needs a scalar loss");
  if (impl_->timer_) impl_->timer_->start(profile::PhaseTimer::kBackward);
  impl_->in_backward_ = true;
  impl_->gather_->set_in_backward(true);
  // fp16: the loss is multiplied by the loss scale (in fp32, so the product itself cannot
  // overflow); the gradients are unscaled at the step, fused with the inf/NaN check.
  const double factor =
      loss_scale() / (scale_wrt_gas ? impl_->options_.gradient_accumulation_steps : 1);
  at::Tensor scaled = loss;
  if (impl_->scaler_) {
    scaled = loss.to(at::kFloat) * factor;
  } else if (factor != 1.0) {
    scaled = loss * factor;
  }
  // Stages 2-3 reduce every micro-step; stages 0-1 only on the accumulation boundary.
  impl_->grad_sync_->begin_backward(impl_->options_.stage >= 2 ||
                                    is_gradient_accumulation_boundary());
  if (impl_->flops_) impl_->flops_->begin_backward();
  try {
    scaled.backward();
  } catch (...) {
    if (impl_->flops_) impl_->flops_->end_backward();
    if (is_gradient_accumulation_boundary()) impl_->sharded_step_->abandon_reductions();
    impl_->in_backward_ = false;
    impl_->gather_->set_in_backward(false);
    throw;
  }
  if (impl_->flops_) impl_->flops_->end_backward();
  impl_->gather_->set_in_backward(false);
  finish_backward();
  impl_->in_backward_ = false;
  if (impl_->timer_) impl_->timer_->stop(profile::PhaseTimer::kBackward);
}

void Engine::on_bucket_complete(size_t b) {
  // Stage 3: every parameter of this bucket has its gradient, so no backward node needs them
  // anymore. The root unit stays gathered until backward ends.
  if (impl_->buckets_[b]->unit() != impl_->gather_->root()) impl_->gather_->release_bucket(b);
}

void Engine::finish_backward() {
  impl_->grad_sync_->finish_backward();
  if (!impl_->gather_->in_scope()) impl_->gather_->release_all();
}

void Engine::step() {
  const bool boundary = is_gradient_accumulation_boundary();
  ++impl_->micro_steps_;
  if (!boundary) return;
  const auto start = std::chrono::steady_clock::now();
  if (impl_->timer_) impl_->timer_->start(profile::PhaseTimer::kStep);
  const zero::StepOutcome outcome =
      impl_->sharded_step_->step(step_hyper(), impl_->scaler_.get(), impl_->global_step_);
  for (auto& b : impl_->buckets_) b->zero_grads();
  if (impl_->host_cache_.held) zero::end_of_host_cache_step();
  ++impl_->global_step_;
  if (outcome.skipped) {
    // Skipped on every rank; the LR schedule does not advance.
    ++impl_->skipped_steps_;
    ZT_LOG_INFO("step ", impl_->global_step_ - 1,
                ": inf/NaN gradients, step skipped; loss scale now ", loss_scale());
  } else {
    impl_->last_grad_norm_ = outcome.grad_norm;
  }
  if (impl_->timer_) impl_->timer_->stop(profile::PhaseTimer::kStep);
  if (impl_->flops_) impl_->flops_->end_step(impl_->global_step_, seconds_since(start));
  if (impl_->timer_ && impl_->options_.steps_per_print > 0 &&
      impl_->global_step_ % impl_->options_.steps_per_print == 0) {
    log_breakdown();
  }
}

// DeepSpeed's wall_clock_breakdown: where the time of the last steps_per_print optimizer steps
// went, in milliseconds per optimizer step, on rank 0; on an accelerator the phases are the
// device's times (core/profile/phase_timer.h), the communication wait the host's.
void Engine::log_breakdown() {
  const double n = impl_->options_.steps_per_print;
  const std::array<double, profile::PhaseTimer::kPhases> ms = impl_->timer_->take();
  const double comm = impl_->clock_.seconds() - impl_->comm_wait_at_report_;
  ZT_LOG_INFO("time (ms/step) at step ", impl_->global_step_, ": forward ",
              ms[profile::PhaseTimer::kForward] / n, " | backward ",
              ms[profile::PhaseTimer::kBackward] / n, " | step ",
              ms[profile::PhaseTimer::kStep] / n, " | comm wait ", comm * 1e3 / n);
  impl_->comm_wait_at_report_ = impl_->clock_.seconds();
}

void Engine::zero_grad() {
  ZT_CHECK(!impl_->in_backward_, "engine.zero_grad() called during backward");
  for (auto& b : impl_->buckets_) b->zero_grads();
}

double Engine::get_lr() const {
  return step_hyper().lr;
}

optim::GroupHyper Engine::step_hyper() const {
  optim::GroupHyper h = impl_->options_.hyper;
  const auto& schedule = impl_->options_.lr_schedule;
  if (!schedule) return h;
  // Skipped (overflow) steps do not advance the schedule. DeepSpeed's order: the optimizer step
  // s runs with what the scheduler set at last_batch_iteration s - 1 (optim/lr_schedule.h).
  const int64_t last = impl_->global_step_ - impl_->skipped_steps_ - 1;
  h.lr = schedule->lr_at(last);
  if (const auto betas = schedule->betas_at(last)) std::tie(h.beta1, h.beta2) = *betas;
  return h;
}

void Engine::train(bool on) {
  impl_->model_->train(on);
}

MemoryReport Engine::memory() const {
  MemoryReport m;
  for (const auto& b : impl_->buckets_) {
    const int64_t full = b->full_param_bytes();
    if (!b->shard_on_nvme())
      m.param_bytes += b->sharded() ? full / impl_->shard_comm_->size() : full;
    m.param_bytes += b->secondary_bytes();
    m.grad_bytes += b->grad_bytes();
  }
  for (const auto& b : impl_->frozen_buckets_) {
    m.frozen_param_bytes += b->resident_bytes() + b->secondary_bytes();
  }
  for (const auto& [name, p] : impl_->loose_frozen_) {
    m.frozen_param_bytes += p.numel() * static_cast<int64_t>(p.element_size());
  }
  m.optimizer_state_bytes = impl_->sharded_step_->optimizer_state_bytes();
  m.master_bytes = impl_->sharded_step_->master_bytes();
  m.nvme_bytes = impl_->sharded_step_->nvme_bytes();
  m.nvme_buffer_bytes = impl_->sharded_step_->nvme_buffer_bytes();
  if (impl_->param_swapper_) {
    m.nvme_bytes += impl_->param_swapper_->nvme_bytes();
    m.nvme_buffer_bytes += impl_->param_swapper_->buffer_bytes();
  }
  if (impl_->gather_) {
    m.gathered_param_bytes = impl_->gather_->gathered_bytes();
    m.peak_gathered_param_bytes = impl_->gather_->peak_gathered_bytes();
  }
  return m;
}

GatherTraffic Engine::gather_traffic() const {
  GatherTraffic t;
  if (impl_->gather_) {
    t.gathered_bytes = impl_->gather_->traffic().gathered_bytes;
    t.unrouted_bytes = impl_->gather_->traffic().unrouted_bytes;
  }
  return t;
}

std::vector<Engine::ShardState> Engine::shard_states() {
  std::vector<ShardState> out;
  for (size_t b = 0; b < impl_->buckets_.size(); ++b) {
    out.push_back({&impl_->buckets_[b]->layout(), impl_->buckets_[b]->stepped(),
                   impl_->sharded_step_->masters().resident(b),
                   impl_->sharded_step_->optimizer(b)});
  }
  return out;
}

zero::MasterStore& Engine::master_store() const {
  return impl_->sharded_step_->masters();
}

void Engine::sync_params_from_masters() {
  at::NoGradGuard no_grad;
  impl_->sharded_step_->copy_masters_to_params();
  for (auto& b : impl_->buckets_) b->publish_params(*impl_->shard_comm_, impl_->clock_);
}

void Engine::restore_counters(int64_t global_step, int64_t skipped_steps, int64_t micro_steps) {
  impl_->global_step_ = global_step;
  impl_->skipped_steps_ = skipped_steps;
  impl_->micro_steps_ = micro_steps;
  for (auto& b : impl_->buckets_) b->zero_grads();
}

std::vector<std::pair<std::string, at::Tensor>> Engine::named_parameters_by_unit() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& unit : impl_->plan_.units) {
    out.insert(out.end(), unit->params.begin(), unit->params.end());
  }
  for (const auto& b : impl_->frozen_buckets_) {
    for (const auto& e : b->layout().entries()) out.emplace_back(e.name, e.param);
  }
  out.insert(out.end(), impl_->loose_frozen_.begin(), impl_->loose_frozen_.end());
  return out;
}

void Engine::for_each_full_parameter(
    const std::function<void(const std::string&, const at::Tensor&)>& fn) {
  at::NoGradGuard no_grad;
  for (size_t u = 0; u < impl_->plan_.units.size(); ++u) {
    impl_->gather_->gather_unit(u, /*wait=*/true);
    for (const auto& [name, param] : impl_->plan_.units[u]->params) fn(name, param);
    if (!impl_->gather_->in_scope()) impl_->gather_->release_unit(u);
  }
  // Frozen buffers one at a time, so at most one is gathered here.
  for (auto& b : impl_->frozen_buckets_) {
    const bool was_gathered = b->gathered();
    b->start_param_gather(*impl_->shard_comm_, impl_->hpz_comm_.get());
    b->finish_param_gather(impl_->clock_);
    for (const auto& e : b->layout().entries()) fn(e.name, e.param);
    if (!was_gathered) b->release_params(impl_->clock_);
  }
  for (const auto& [name, p] : impl_->loose_frozen_) fn(name, p);
}

void Engine::for_each_frozen_value(
    const std::function<void(const std::string&, const at::Tensor&)>& fn) {
  at::NoGradGuard no_grad;
  for (auto& b : impl_->frozen_buckets_) {
    const at::Tensor values = b->values(*impl_->shard_comm_, impl_->clock_);
    for (const auto& e : b->layout().entries()) {
      fn(e.name, values.narrow(0, e.range.begin, e.range.size()).view(e.param.sizes()));
    }
  }
  for (const auto& [name, p] : impl_->loose_frozen_) fn(name, p);
}

void Engine::load_frozen(const std::map<std::string, at::Tensor>& values) {
  at::NoGradGuard no_grad;
  for (auto& b : impl_->frozen_buckets_) {
    // Parameters missing from `values` keep what they hold.
    at::Tensor full = b->values(*impl_->shard_comm_, impl_->clock_);
    for (const auto& e : b->layout().entries()) {
      auto it = values.find(e.name);
      if (it != values.end())
        full.narrow(0, e.range.begin, e.range.size()).copy_(it->second.reshape({-1}));
    }
    b->assign(full, impl_->clock_);
  }
  for (auto& [name, p] : impl_->loose_frozen_) {
    auto it = values.find(name);
    if (it != values.end()) p.detach().copy_(it->second);
  }
}

Engine::GatheredParameters::GatheredParameters(Engine& engine, bool write_back)
    : engine_(engine), write_back_(write_back) {
  engine_.impl_->gather_->open_scope();
}

Engine::GatheredParameters::~GatheredParameters() {
  Impl& e = *engine_.impl_;
  if (write_back_) {
    at::NoGradGuard no_grad;
    for (auto& b : e.buckets_) b->keep_shard();
    for (auto& b : e.frozen_buckets_) b->keep_shard();
    e.sharded_step_->copy_params_to_masters();
  }
  if (e.gather_->close_scope() && !e.in_backward_) e.gather_->release_all();
}

}  // namespace zt
