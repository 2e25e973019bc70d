#include "core/zero/param_gather.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "base/error.h"
#include "core/zero/bucket_plan.h"

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
  void before_routed_forward(const at::Tensor& rows) override {
    routed_ = gather_->routed_anywhere(unit_, rows);
    gather_->gather_routed(unit_, routed_, /*wait=*/true);
    gather_->prefetch_after(unit_, gather_->in_backward() ? -1 : +1);
  }
  void after_forward(at::TensorList outputs) override {
    ParamGather* gather = gather_;
    size_t unit = unit_;
    // A routed call's backward needs the experts its forward gathered, and no others.
    const std::vector<bool> routed = std::move(routed_);
    routed_.clear();
    bool backward_follows = false;
    for (const at::Tensor& output : outputs) {
      if (!(output.defined() && at::GradMode::is_enabled() && output.requires_grad())) continue;
      backward_follows = true;
      // Fires when the gradient w.r.t. this output is known, i.e. just before the unit's own
      // backward: gather its parameters again and prefetch the unit before it (a no-op for the
      // second output of a unit already gathered).
      output.register_hook([gather, unit, routed](const at::Tensor& grad) {
        if (!gather->in_scope()) gather->release_frozen_after(unit);
        if (routed.empty()) {
          gather->gather_unit(unit, /*wait=*/true);
        } else {
          gather->gather_routed(unit, routed, /*wait=*/true);
        }
        gather->prefetch_after(unit, -1);
        return grad;
      });
    }
    // Kept only where a backward will come for it; Engine::finish_backward releases what its
    // gradients did not, and Engine::forward everything after an evaluation forward.
    const bool keep = backward_follows && gather->kept_for_backward(unit);
    if (!gather->in_scope() && !gather->in_backward() && !keep) gather->release_unit(unit);
  }

 private:
  ParamGather* gather_;
  size_t unit_;
  std::vector<bool> routed_;  // of the routed call in progress
};

ParamGather::ParamGather(UnitPlan& plan, std::vector<std::unique_ptr<Bucket>>& buckets,
                         std::vector<std::unique_ptr<Bucket>>& frozen, dist::Communicator& comm,
                         dist::Communicator* secondary, WaitClock& clock, bool active,
                         int64_t prefetch_numel, int64_t max_reuse_distance)
    : plan_(plan),
      buckets_(buckets),
      frozen_(frozen),
      comm_(comm),
      secondary_(secondary),
      clock_(clock),
      active_(active),
      prefetch_numel_(prefetch_numel) {
  if (!active_) return;  // below stage 3 nothing is gathered, so nothing is kept
  std::vector<int64_t> numel;
  std::vector<bool> routed;
  for (size_t u = 0; u < plan_.units.size(); ++u) {
    int64_t n = 0;
    for (Bucket* b : unit_buckets(u)) n += b->layout().numel();
    numel.push_back(n);
    routed.push_back(plan_.units[u]->routed);
  }
  kept_ = zero::kept_for_backward(numel, routed, max_reuse_distance);
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
  const int64_t bytes = bucket.start_param_gather(comm_, secondary_);
  gathered_bytes_ += bytes;
  traffic_.gathered_bytes += bytes;
  peak_gathered_bytes_ = std::max(peak_gathered_bytes_, gathered_bytes_);
  if (wait) bucket.finish_param_gather(clock_);
}

std::vector<bool> ParamGather::routed_anywhere(size_t u, const at::Tensor& rows) {
  ZT_CHECK(rows.dim() == 1, "a routed unit's rows per expert must be one count per expert");
  at::Tensor any = rows.gt(0).to(at::kLong);
  if (active_ && comm_.size() > 1) {
    any = any.to(comm_.device());
    comm_.all_reduce(any)->wait();
  }
  any = any.cpu();
  std::vector<bool> routed(static_cast<size_t>(any.numel()));
  const int64_t* n = any.data_ptr<int64_t>();
  for (size_t e = 0; e < routed.size(); ++e) routed[e] = n[e] > 0;
  for (Bucket* b : unit_buckets(u)) {
    for (const auto& entry : b->layout().entries()) {
      ZT_CHECK(entry.param.dim() > 0 && entry.param.size(0) == any.numel(), "routed unit ",
               plan_.units[u]->name, ": parameter ", entry.name, " does not hold ", any.numel(),
               " experts along its first dimension");
    }
  }
  return routed;
}

void ParamGather::gather_routed(size_t u, const std::vector<bool>& routed, bool wait) {
  if (!active_) return;
  const bool all = std::all_of(routed.begin(), routed.end(), [](bool r) { return r; });
  if (all || comm_.size() == 1) {
    gather_unit(u, wait);
    return;
  }
  const std::vector<Bucket*> unit = unit_buckets(u);
  for (Bucket* b : unit) {
    // Each parameter's routed experts, contiguous runs merged.
    std::vector<dist::Range> ranges;
    int64_t unrouted = 0;
    for (const auto& entry : b->layout().entries()) {
      const int64_t per = entry.param.numel() / static_cast<int64_t>(routed.size());
      for (size_t e = 0; e < routed.size(); ++e) {
        const int64_t begin = entry.range.begin + static_cast<int64_t>(e) * per;
        if (!routed[e]) {
          unrouted += per;
        } else if (!ranges.empty() && ranges.back().end == begin) {
          ranges.back().end = begin + per;
        } else {
          ranges.push_back({begin, begin + per});
        }
      }
    }
    const int64_t bytes = b->start_param_gather(comm_, secondary_, &ranges);
    if (bytes == 0) continue;  // already gathered
    gathered_bytes_ += bytes;
    peak_gathered_bytes_ = std::max(peak_gathered_bytes_, gathered_bytes_);
    if (b->partly_gathered()) {
      const int64_t element = bytes / b->layout().padded_numel();
      traffic_.gathered_bytes += (b->layout().numel() - unrouted) * element;
      traffic_.unrouted_bytes += unrouted * element;
    } else {
      traffic_.gathered_bytes += bytes;
    }
  }
  if (wait) {
    for (Bucket* b : unit) b->finish_param_gather(clock_);
  }
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
    if (plan_.units[static_cast<size_t>(v)]->routed) {
      // Gathered once routed; a shard on NVMe can be read ahead all the same.
      for (Bucket* b : unit_buckets(static_cast<size_t>(v))) b->prefetch_shard();
      continue;
    }
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
