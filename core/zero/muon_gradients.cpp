#include "core/zero/muon_gradients.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <ATen/ATen.h>

#include "base/error.h"
#include "optim/clip.h"
#include "optim/muon.h"

namespace zt::zero {

MuonGradients::MuonGradients(const EngineOptions& options,
                             std::vector<std::unique_ptr<Bucket>>& buckets,
                             dist::Communicator& comm, WaitClock& clock,
                             std::function<optim::ShardOptimizer&(size_t)> optimizer_of,
                             c10::Device state_device)
    : options_(options),
      buckets_(buckets),
      comm_(comm),
      clock_(clock),
      optimizer_of_(std::move(optimizer_of)),
      state_device_(state_device) {
  // The momentum is folded here, before the norm, from the optimizer's own state.
  ZT_CHECK(!options_.optimizer.swa.enabled,
           "swa: not implemented with optimizer Muon (its momentum is folded outside the step)");
  for (auto& b : buckets_) {
    PerBucket per;
    const int64_t shard = b->stepped().size();  // every rank's stepped range has this size
    for (const auto& e : b->layout().entries()) {
      if (!optim::uses_muon(e.name, e.param.sizes())) continue;
      per.matrices.push_back({e.range, e.param.sizes().vec()});
      per.gather |= e.range.begin / shard != (e.range.end - 1) / shard;
    }
    buckets_matrices_.push_back(std::move(per));
  }
}

at::Tensor MuonGradients::gradient(size_t b) const {
  return b < grads_.size() && grads_[b].defined() ? grads_[b] : buckets_[b]->owned_grad();
}

std::vector<optim::GroupRange> MuonGradients::ranges(size_t b,
                                                     std::vector<optim::GroupRange> groups) const {
  const optim::MuonSpec& spec = options_.optimizer.muon;
  const dist::Range r = buckets_[b]->stepped();
  std::vector<optim::GroupRange> out;
  for (const optim::GroupRange& g : groups) {
    int64_t at = g.begin;
    auto piece = [&](int64_t end, bool muon) {
      if (end <= at) return;
      optim::GroupRange p = g;
      p.begin = at;
      p.end = end;
      p.hyper.muon = muon;
      p.hyper.lr *= muon ? spec.muon_lr_scale : spec.adam_lr_scale;
      out.push_back(p);
      at = end;
    };
    for (const Matrix& m : buckets_matrices_[b].matrices) {
      const int64_t mb = m.range.begin - r.begin, me = m.range.end - r.begin;
      if (me <= at || mb >= g.end) continue;
      piece(std::max(mb, at), false);
      piece(std::min(me, g.end), true);
    }
    piece(g.end, false);
  }
  return out;
}

at::Tensor MuonGradients::prepare_bucket(size_t b, double inv) {
  Bucket& bucket = *buckets_[b];
  const PerBucket& per = buckets_matrices_[b];
  const optim::NsMethod method = options_.optimizer.muon.ns_method;
  const dist::Range r = bucket.stepped();
  at::Tensor s = bucket.owned_grad().to(at::kFloat).mul(inv);  // (stepped,), a new buffer
  auto* muon = dynamic_cast<optim::Muon*>(&optimizer_of_(b));
  ZT_INTERNAL_ASSERT(muon != nullptr, "Muon step without a Muon optimizer");
  for (const Matrix& m : per.matrices) {
    const dist::Range own = dist::intersect(m.range, r);
    if (own.empty()) continue;
    muon->fold_momentum(s.narrow(0, own.begin - r.begin, own.size()), r.size(), own.begin - r.begin,
                        options_.hyper.momentum, state_device_);
  }
  at::Tensor full;  // (padded,) the blends of every rank's slice
  if (per.gather) {
    full = at::empty({bucket.layout().padded_numel()}, s.options());
    clock_.wait(comm_.all_gather(s, full));
  }
  // A matrix inside one rank's slice is orthogonalised by that rank. One crossing a boundary is
  // orthogonalised by one of the ranks holding it (in turn, by its order among the bucket's
  // crossing matrices, so every rank agrees), into `crossing`, whose sum over ranks then hands
  // each holder its part: one rank contributes each element, so the sum is exact. Every matrix
  // reads its whole before any slice of s is overwritten.
  const int64_t shard = r.size();
  at::Tensor crossing;  // (padded,)
  if (full.defined()) crossing = at::zeros({bucket.layout().padded_numel()}, s.options());
  std::vector<std::pair<dist::Range, at::Tensor>> pieces;
  int64_t crossing_index = 0;
  for (const Matrix& m : per.matrices) {
    const dist::Range own = dist::intersect(m.range, r);
    const int64_t first = m.range.begin / shard, last = (m.range.end - 1) / shard;
    if (first == last) {
      if (own.empty()) continue;
      at::Tensor whole = s.narrow(0, m.range.begin - r.begin, m.range.size());
      at::Tensor o = optim::orthogonalize(whole.view(m.shape), method).reshape({-1});
      pieces.emplace_back(own, o.narrow(0, own.begin - m.range.begin, own.size()));
      continue;
    }
    const int64_t by = first + crossing_index++ % (last - first + 1);
    if (by != comm_.rank()) continue;
    at::Tensor whole = full.narrow(0, m.range.begin, m.range.size());
    crossing.narrow(0, m.range.begin, m.range.size())
        .copy_(optim::orthogonalize(whole.view(m.shape), method).reshape({-1}));
  }
  if (crossing.defined()) {
    clock_.wait(comm_.all_reduce(crossing, dist::ReduceOp::kSum));
    for (const Matrix& m : per.matrices) {
      const dist::Range own = dist::intersect(m.range, r);
      if (own.empty() || m.range.begin / shard == (m.range.end - 1) / shard) continue;
      pieces.emplace_back(own, crossing.narrow(0, own.begin, own.size()));
    }
  }
  for (auto& [own, o] : pieces) s.narrow(0, own.begin - r.begin, own.size()).copy_(o);
  return s;
}

double MuonGradients::prepare(const std::vector<size_t>& stepped, double inv, double raw_sq) {
  (void)raw_sq;  // the norm is over the prepared gradients
  grads_.assign(buckets_.size(), at::Tensor());
  double sum = 0;
  for (size_t b : stepped) {
    at::Tensor s = prepare_bucket(b, inv);
    sum += s.is_cpu() ? optim::sum_of_squares(s)
                      : at::linalg_vector_norm(s, 2, c10::nullopt, false, at::kFloat)
                            .to(at::kDouble)
                            .square()
                            .item<double>();
    grads_[b] = std::move(s);
  }
  // Every rank steps whole buffers: the sum is already global.
  if (!steps_whole_buffers(buckets_)) {
    at::Tensor t =
        at::full({1}, sum, at::TensorOptions().dtype(at::kDouble).device(comm_.device()));
    sum = clock_.read<double>(comm_.all_reduce(t, dist::ReduceOp::kSum), t);
  }
  return std::sqrt(sum);
}

}  // namespace zt::zero
