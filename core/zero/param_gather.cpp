#include "core/zero/param_gather.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

namespace zt::zero {

// What zt::call_unit runs around a declared unit's forward.
class ParamGather::Hooks : public UnitHooks {
 public:
  Hooks(ParamGather* gather, size_t unit) : gather_(gather), unit_(unit) {}
  // Inside backward a unit's forward runs again only to recompute activations (a checkpointed
  // unit whose hooks sit inside the checkpoint, e.g. torch.utils.checkpoint around a Python
  // module call): its backward follows at once, so the parameters stay gathered, and the units to
  // prefetch are the ones before it.
  void before_forward() override {
    gather_->gather_unit(unit_, /*wait=*/true);
    gather_->prefetch_after(unit_, gather_->in_backward() ? -1 : +1);
  }
  void after_forward(at::TensorList outputs) override {
    ParamGather* gather = gather_;
    size_t unit = unit_;
    for (const at::Tensor& output : outputs) {
      if (!(output.defined() && at::GradMode::is_enabled() && output.requires_grad())) continue;
      // Fires when the gradient w.r.t. this output is known, i.e. just before the unit's own
      // backward: gather its parameters again and prefetch the unit before it (a no-op for the
      // second output of a unit already gathered).
      output.register_hook([gather, unit](const at::Tensor& grad) {
        if (!gather->in_scope()) gather->release_frozen_after(unit);
        gather->gather_unit(unit, /*wait=*/true);
        gather->prefetch_after(unit, -1);
        return grad;
      });
    }
    if (!gather->in_scope() && !gather->in_backward()) gather->release_unit(unit);
  }

 private:
  ParamGather* gather_;
  size_t unit_;
};

ParamGather::ParamGather(UnitPlan& plan, std::vector<std::unique_ptr<Bucket>>& buckets,
                         std::vector<std::unique_ptr<Bucket>>& frozen, dist::Communicator& comm,
                         dist::Communicator* secondary, WaitClock& clock, bool active,
                         int64_t prefetch_numel)
    : plan_(plan),
      buckets_(buckets),
      frozen_(frozen),
      comm_(comm),
      secondary_(secondary),
      clock_(clock),
      active_(active),
      prefetch_numel_(prefetch_numel) {
  if (!active_) return;
  for (size_t u = 0; u < root(); ++u) {
    plan_.units[u]->hooks = std::make_unique<Hooks>(this, u);
    UnitRegistry::instance().add(plan_.units[u]->module, plan_.units[u]->hooks.get());
  }
}

ParamGather::~ParamGather() {
  for (auto& u : plan_.units) {
    if (u->module && u->hooks) UnitRegistry::instance().remove(u->module);
  }
}

std::vector<Bucket*> ParamGather::unit_buckets(size_t u) const {
  std::vector<Bucket*> out;
  for (size_t b : plan_.units[u]->buckets) out.push_back(buckets_[b].get());
  for (size_t f : plan_.units[u]->frozen_buckets) out.push_back(frozen_[f].get());
  return out;
}

void ParamGather::gather(Bucket& bucket, bool wait) {
  gathered_bytes_ += bucket.start_param_gather(comm_, secondary_);
  peak_gathered_bytes_ = std::max(peak_gathered_bytes_, gathered_bytes_);
  if (wait) bucket.finish_param_gather(clock_);
}

void ParamGather::release(Bucket& bucket) {
  gathered_bytes_ -= bucket.release_params(clock_);
}

void ParamGather::gather_unit(size_t u, bool wait) {
  if (!active_) return;
  const std::vector<Bucket*> unit = unit_buckets(u);
  for (Bucket* b : unit) gather(*b, false);
  if (wait) {
    for (Bucket* b : unit) b->finish_param_gather(clock_);
  }
}

void ParamGather::prefetch_after(size_t u, int direction) {
  int64_t budget = prefetch_numel_;
  const int64_t declared = static_cast<int64_t>(root());
  int64_t v = static_cast<int64_t>(u) + direction;
  for (; v >= 0 && v < declared && budget > 0; v += direction) {
    for (Bucket* b : unit_buckets(static_cast<size_t>(v))) {
      budget -= b->layout().padded_numel();
      gather(*b, false);
    }
  }
  // Shards on NVMe: the units after those start reading from their files, as far as free swap
  // buffers reach (nvme_params.h), so their all-gathers find them in memory.
  for (; v >= 0 && v < declared; v += direction) {
    for (Bucket* b : unit_buckets(static_cast<size_t>(v))) b->prefetch_shard();
  }
}

void ParamGather::release_bucket(size_t b) {
  if (!active_) return;
  release(*buckets_[b]);
}

void ParamGather::release_frozen_after(size_t u) {
  if (!active_) return;
  for (size_t v = u + 1; v < root(); ++v) {
    for (size_t f : plan_.units[v]->frozen_buckets) release(*frozen_[f]);
  }
}

void ParamGather::release_unit(size_t u) {
  if (!active_) return;
  for (Bucket* b : unit_buckets(u)) release(*b);
}

void ParamGather::gather_all() {
  if (!active_) return;
  for (size_t u = 0; u < plan_.units.size(); ++u) gather_unit(u, false);
  for (auto& b : buckets_) b->finish_param_gather(clock_);
  for (auto& b : frozen_) b->finish_param_gather(clock_);
}

void ParamGather::release_all() {
  if (!active_) return;
  for (auto& b : buckets_) release(*b);
  for (auto& b : frozen_) release(*b);
}

void ParamGather::open_scope() {
  ++scopes_;
  gather_all();
}

bool ParamGather::close_scope() {
  return --scopes_ == 0;
}

}  // namespace zt::zero
