#include "core/zero/grad_reduction.h"

#include <algorithm>
#include <vector>

#include <ATen/ATen.h>

#include "base/error.h"
#include "core/zero/released_storage.h"
#include "optim/clip.h"

namespace zt::zero {
namespace {

class FlatReduction : public ReductionInFlight {
 public:
  FlatReduction(dist::WorkPtr work, at::Tensor result)
      : work_(std::move(work)), result_(std::move(result)) {}
  at::Tensor finish(WaitClock& clock) override {
    clock.wait(work_);
    return result_;
  }

 private:
  dist::WorkPtr work_;
  at::Tensor result_;
};

// The tensor reduced: `src` in the communication dtype (a copy when that differs from the
// accumulation dtype, else `src` itself) times the pre-reduction scale.
at::Tensor reduction_input(const GradReductionSpec& spec, const at::Tensor& src) {
  at::Tensor in = spec.comm_dtype != src.scalar_type() ? src.to(spec.comm_dtype) : src;
  if (spec.pre_reduce_scale != 1.0) in.mul_(spec.pre_reduce_scale);
  return in;
}

int64_t grad_nbytes(const at::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

class WindowGrads : public GradReduction {
 public:
  WindowGrads(const GradReductionSpec& spec, bool all_reduce)
      : spec_(spec), all_reduce_(all_reduce), full_(at::zeros({spec.padded}, spec.grad)) {}

  void add(dist::Range range, const at::Tensor& grad) override {
    full_.narrow(0, range.begin, range.size()).add_(grad);
  }
  void start(dist::Communicator& comm) override {
    comm_in_ = reduction_input(spec_, full_);
    in_flight_ = spec_.transport(comm, comm_in_, at::Tensor());
  }
  void finish(WaitClock& clock) override {
    if (!in_flight_) return;
    at::Tensor out = in_flight_->finish(clock);
    in_flight_.reset();
    comm_in_ = at::Tensor();
    if (all_reduce_) {
      if (!out.is_same(full_)) full_.copy_(out);
    } else {
      reduced_ = out.scalar_type() != full_.scalar_type() ? out.to(full_.scalar_type()) : out;
    }
  }
  at::Tensor owned() const override { return all_reduce_ ? full_ : reduced_; }
  void zero() override {
    ZT_INTERNAL_ASSERT(!in_flight_, "zero_grads with a gradient reduction in flight");
    full_.zero_();
    reduced_ = at::Tensor();
  }
  int64_t bytes() const override { return grad_nbytes(full_); }

 private:
  GradReductionSpec spec_;
  bool all_reduce_;
  at::Tensor full_, comm_in_;
  at::Tensor reduced_;  // stage 1: the window's reduced slice
  std::unique_ptr<ReductionInFlight> in_flight_;
};

class MicroStepGrads : public GradReduction {
 public:
  MicroStepGrads(const GradReductionSpec& spec, bool release_shard)
      : spec_(spec), release_shard_(release_shard) {
    // Never read before the window's first reduction writes it (has_grad_), so it is not zeroed:
    // its pages stay untouched (and off the resident set) until the first backward, which keeps
    // them out of the peak of building and casting a model that barely fits.
    shard_ =
        release_shard_ ? empty_released(spec.shard, spec.grad) : at::empty({spec.shard}, spec.grad);
  }

  // Each parameter's gradient comes once per backward (more than once only under reentrant
  // checkpointing, for a parameter used in several segments): the first is copied into the
  // staging buffer, a later one added, and start() zeroes what none wrote (padding, parameters
  // without a gradient). Zeroing the whole buffer first and adding every gradient would pass
  // over it once more each micro-step.
  void add(dist::Range range, const at::Tensor& grad) override {
    if (!staging_.defined()) staging_ = at::empty({spec_.padded}, spec_.grad);
    at::Tensor into = staging_.narrow(0, range.begin, range.size());
    const bool first = std::none_of(written_.begin(), written_.end(),
                                    [&](const dist::Range& r) { return r.begin == range.begin; });
    if (first) {
      into.copy_(grad);
      written_.push_back(range);
    } else {
      into.add_(grad);
    }
  }
  void start(dist::Communicator& comm) override {
    // No parameter of this bucket got a gradient: it still takes part in the collective.
    if (!staging_.defined()) staging_ = at::empty({spec_.padded}, spec_.grad);
    zero_unwritten();
    comm_in_ = reduction_input(spec_, staging_);
    at::Tensor out;
    if (!has_grad_ && comm_in_.scalar_type() == shard_.scalar_type()) {
      // The first micro-step of a window reduces straight into the accumulation buffer.
      hold();
      out = shard_;
    }
    in_flight_ = spec_.transport(comm, comm_in_, out);
  }
  void finish(WaitClock& clock) override {
    if (!in_flight_) return;
    at::Tensor out = in_flight_->finish(clock);
    in_flight_.reset();
    if (!out.is_same(shard_)) {
      hold();
      if (has_grad_) {
        if (spill_) spill_->read(slot_, shard_);  // the window's sum so far
        shard_.add_(out);
      } else {
        shard_.copy_(out);
      }
    }
    has_grad_ = true;
    comm_in_ = at::Tensor();
    staging_ = at::Tensor();  // transient: freed as soon as it is reduced
    written_.clear();
    if (spill_) {
      // The norm's read of this slice happens now, while it is in memory: the last micro-step's
      // value stands for the window.
      spilled_squares_ = grad_sum_of_squares(shard_);
      spill_->write(slot_, shard_);
      release_storage(shard_);
    }
  }
  at::Tensor owned() const override { return has_grad_ && !spill_ ? shard_ : at::Tensor(); }
  void zero() override {
    ZT_INTERNAL_ASSERT(!in_flight_, "zero_grads with a gradient reduction in flight");
    has_grad_ = false;  // the next reduction overwrites shard_ (no zeroing pass)
    if (release_shard_ && shard_.storage().nbytes() > 0) release_storage(shard_);
    staging_ = at::Tensor();
    written_.clear();
  }
  int64_t bytes() const override { return spill_ ? 0 : grad_nbytes(shard_); }

  void spill_to(GradSpill* spill, size_t slot) override {
    ZT_INTERNAL_ASSERT(release_shard_ && !has_grad_ && !in_flight_,
                       "a gradient spills only from host memory, before its first reduction");
    spill_ = spill;
    slot_ = slot;
  }
  bool has_grad() const override { return has_grad_; }
  std::optional<double> spilled_sum_of_squares() const override {
    if (!spill_ || !has_grad_) return std::nullopt;
    return spilled_squares_;
  }
  at::Tensor load_owned() const override {
    if (!spill_ || !has_grad_) return owned();
    at::Tensor t = at::empty({spec_.shard}, spec_.grad);
    spill_->read(slot_, t);
    return t;
  }

 private:
  // Zeroes the staging buffer outside the ranges add() wrote.
  void zero_unwritten() {
    std::sort(written_.begin(), written_.end(),
              [](const dist::Range& a, const dist::Range& b) { return a.begin < b.begin; });
    int64_t at = 0;
    for (const dist::Range& r : written_) {
      if (r.begin > at) staging_.narrow(0, at, r.begin - at).zero_();
      at = std::max(at, r.begin + r.size());
    }
    if (at < spec_.padded) staging_.narrow(0, at, spec_.padded - at).zero_();
    written_.clear();
  }

  // release_shard: gives shard_ its bytes if it holds none (zero() released them).
  void hold() {
    if (release_shard_ && shard_.storage().nbytes() == 0) {
      refill_storage(shard_, static_cast<size_t>(grad_nbytes(shard_)));
    }
  }

  GradReductionSpec spec_;
  bool release_shard_;
  at::Tensor shard_, staging_, comm_in_;
  std::vector<dist::Range> written_;  // the ranges of staging_ add() has written
  bool has_grad_ = false;             // shard_ (or the spill) holds gradients of this window
  std::unique_ptr<ReductionInFlight> in_flight_;
  GradSpill* spill_ = nullptr;
  size_t slot_ = 0;
  double spilled_squares_ = 0;
};

}  // namespace

void GradReduction::spill_to(GradSpill*, size_t) {
  ZT_INTERNAL_ASSERT(false, "only stage 2-3 gradient slices spill");
}

double grad_sum_of_squares(const at::Tensor& g) {
  if (g.scalar_type() == at::kFloat) return optim::sum_of_squares(g);
  return at::linalg_vector_norm(g, 2, c10::nullopt, false, at::kFloat)
      .to(at::kDouble)
      .square()
      .item<double>();
}

std::unique_ptr<GradReduction> make_window_grads(const GradReductionSpec& spec, bool all_reduce) {
  return std::make_unique<WindowGrads>(spec, all_reduce);
}

std::unique_ptr<GradReduction> make_micro_step_grads(const GradReductionSpec& spec,
                                                     bool release_shard) {
  return std::make_unique<MicroStepGrads>(spec, release_shard);
}

StartReduction flat_all_reduce() {
  return [](dist::Communicator& comm, const at::Tensor& in,
            const at::Tensor&) -> std::unique_ptr<ReductionInFlight> {
    at::Tensor sum = in;  // a handle: summed in place
    return std::make_unique<FlatReduction>(comm.all_reduce(sum, dist::ReduceOp::kSum), sum);
  };
}

StartReduction flat_reduce_scatter(int64_t shard) {
  return [shard](dist::Communicator& comm, const at::Tensor& in,
                 const at::Tensor& out) -> std::unique_ptr<ReductionInFlight> {
    at::Tensor into = out.defined() ? out : at::empty({shard}, in.options());
    return std::make_unique<FlatReduction>(comm.reduce_scatter(in, into, dist::ReduceOp::kSum),
                                           into);
  };
}

}  // namespace zt::zero
