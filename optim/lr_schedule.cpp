#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "base/logging.h"

namespace zt::optim {
namespace {

constexpr double kPi = 3.14159265358979323846;

// The warm-up fraction in [0, 1) of DeepSpeed's _get_gamma for step < warmup_num_steps.
struct Warmup {
  int64_t num_steps = 1000;  // already max(2, configured)
  bool log = true;
  double fraction(int64_t step) const {
    // DeepSpeed multiplies by a stored 1 / log(n) rather than dividing by log(n): the same
    // operations give the same last bit of the lr.
    if (log)
      return (1.0 / std::log(static_cast<double>(num_steps))) *
             std::log(static_cast<double>(step + 1));
    return static_cast<double>(step) / static_cast<double>(num_steps);
  }
};

Warmup read_warmup(const ScheduleSpec& p) {
  Warmup w;
  // DeepSpeed's WarmupLR takes max(2, warmup_num_steps), so 0 (what the Hugging Face Trainer
  // writes for "auto" with its default warmup_steps 0) is accepted and means 2.
  w.num_steps = std::max<int64_t>(2, p.warmup_num_steps);
  w.log = p.warmup_type == WarmupShape::kLog;
  return w;
}

class WarmupLr : public LrSchedule {
 public:
  WarmupLr(const ScheduleSpec& p, bool decay) : decay_(decay) {
    if (decay_) total_num_steps_ = p.total_num_steps;
    min_lr_ = p.warmup_min_lr;
    max_lr_ = p.warmup_max_lr;
    warmup_ = read_warmup(p);
    if (decay_ && total_num_steps_ < warmup_.num_steps) {
      ZT_LOG_WARN("scheduler.params.total_num_steps ", total_num_steps_,
                  " is less than warmup_num_steps ", warmup_.num_steps);
    }
  }
  double lr_at(int64_t step) const override {
    if (step < 0) return min_lr_;
    return min_lr_ + (max_lr_ - min_lr_) * gamma(step);
  }
  std::string name() const override { return decay_ ? "WarmupDecayLR" : "WarmupLR"; }

 private:
  double gamma(int64_t step) const {
    if (step < warmup_.num_steps) return warmup_.fraction(step);
    if (!decay_) return 1.0;
    const double left = static_cast<double>(total_num_steps_ - step);
    return std::max(
        0.0, left / std::max(1.0, static_cast<double>(total_num_steps_ - warmup_.num_steps)));
  }

  bool decay_;
  int64_t total_num_steps_ = 0;
  double min_lr_ = 0, max_lr_ = 0;
  Warmup warmup_;
};

class WarmupCosineLr : public LrSchedule {
 public:
  WarmupCosineLr(const ScheduleSpec& p, double base_lr) : base_lr_(base_lr) {
    total_num_steps_ = p.total_num_steps;
    warmup_min_ratio_ = p.warmup_min_ratio;
    cos_min_ratio_ = p.cos_min_ratio;
    warmup_ = read_warmup(p);
    if (total_num_steps_ < warmup_.num_steps) {
      ZT_LOG_WARN("scheduler.params.total_num_steps ", total_num_steps_,
                  " is less than warmup_num_steps ", warmup_.num_steps);
    }
  }
  double lr_at(int64_t step) const override {
    if (step < 0) return 0.0;
    return base_lr_ * ratio(step);
  }
  std::string name() const override { return "WarmupCosineLR"; }

 private:
  double ratio(int64_t step) const {
    if (step < warmup_.num_steps) {
      return warmup_min_ratio_ + warmup_.fraction(step) * (1 - warmup_min_ratio_);
    }
    const double real_last = static_cast<double>(step - warmup_.num_steps + 1);
    const double real_total =
        static_cast<double>(std::max<int64_t>(1, total_num_steps_ - warmup_.num_steps));
    const double progress = std::min(1.0, real_last / real_total);  // stays at the floor after
    const double r = (1 + std::cos(kPi * progress)) / 2;
    return std::max(0.0, cos_min_ratio_ + (1 - cos_min_ratio_) * r);
  }

  double base_lr_;
  int64_t total_num_steps_ = 0;
  double warmup_min_ratio_ = 0, cos_min_ratio_ = 0;
  Warmup warmup_;
};

class OneCycle : public LrSchedule {
 public:
  explicit OneCycle(const ScheduleSpec& p) {
    min_lr_ = p.cycle_min_lr;
    max_lr_ = p.cycle_max_lr;
    decay_lr_rate_ = p.decay_lr_rate;
    first_ = static_cast<double>(p.cycle_first_step_size);
    second_ = static_cast<double>(p.cycle_second_step_size.value_or(p.cycle_first_step_size));
    first_stairs_ = p.cycle_first_stair_count;
    second_stairs_ = p.cycle_second_stair_count.value_or(first_stairs_);
    decay_step_size_ = static_cast<double>(p.decay_step_size);
    cycle_momentum_ = p.cycle_momentum;
    min_mom_ = p.cycle_min_mom;
    max_mom_ = p.cycle_max_mom;
    decay_mom_rate_ = p.decay_mom_rate;
    // DeepSpeed: no decay step size means no decay at all; a zero rate disables that decay.
    skip_lr_decay_ = decay_step_size_ == 0 || decay_lr_rate_ == 0;
    skip_mom_decay_ = decay_step_size_ == 0 || decay_mom_rate_ == 0;
  }
  double lr_at(int64_t step) const override {
    if (static_cast<double>(step) < total()) return min_lr_ + (max_lr_ - min_lr_) * scale(step);
    if (skip_lr_decay_) return min_lr_;
    return min_lr_ / (1 + decay_lr_rate_ * decay_interval(step));
  }
  std::optional<std::pair<double, double>> betas_at(int64_t step) const override {
    if (!cycle_momentum_) return std::nullopt;
    return std::pair(beta1_at(step), kCycledBeta2);
  }
  std::string name() const override { return "OneCycle"; }

 private:
  // DeepSpeed's _initialize_momentum pairs every cycled beta1 with this beta2.
  static constexpr double kCycledBeta2 = 0.99;

  double total() const { return first_ + second_; }
  double beta1_at(int64_t step) const {
    // At construction DeepSpeed sets betas[0] to cycle_min_mom, not to the cycle's value.
    if (step < 0) return min_mom_;
    if (static_cast<double>(step) < total()) return max_mom_ - (max_mom_ - min_mom_) * scale(step);
    if (skip_mom_decay_) return max_mom_;
    return max_mom_ * (1 + decay_mom_rate_ * decay_interval(step));
  }
  double decay_interval(int64_t step) const {
    return (static_cast<double>(step) - total() + 1) / decay_step_size_;
  }
  // DeepSpeed's _get_scale_factor: 0 -> 1 over the first half, 1 -> 0 over the second, with
  // optional stairs computed from the integer offset in the cycle.
  double scale(int64_t step) const {
    const double it = static_cast<double>(step + 1);
    const double cycle = std::floor(1 + it / total());
    const double x = 1 + it / total() - cycle;
    const double ratio = first_ / total();
    double s;
    int64_t stairs;
    if (x <= ratio) {
      s = x / ratio;
      stairs = first_stairs_;
    } else {
      s = (x - 1) / (ratio - 1);
      stairs = second_stairs_;
    }
    if (stairs > 0) {
      const double in_cycle = std::fmod(it, total());
      const double pos =
          in_cycle <= first_ ? in_cycle * stairs / first_ : (total() - in_cycle) * stairs / second_;
      s = std::floor(pos) / static_cast<double>(stairs);
    }
    return s;
  }

  double min_lr_ = 0, max_lr_ = 0, decay_lr_rate_ = 0;
  double first_ = 0, second_ = 0;
  int64_t first_stairs_ = 0, second_stairs_ = 0;
  double decay_step_size_ = 0;
  bool cycle_momentum_ = true;
  double min_mom_ = 0, max_mom_ = 0, decay_mom_rate_ = 0;
  bool skip_lr_decay_ = true, skip_mom_decay_ = true;
};

}  // namespace

LrSchedule::~LrSchedule() = default;

std::optional<std::pair<double, double>> LrSchedule::betas_at(int64_t) const {
  return std::nullopt;
}

std::unique_ptr<LrSchedule> make_lr_schedule(const ScheduleSpec& spec, double base_lr) {
  switch (spec.type) {
    case ScheduleKind::kWarmupLR: return std::make_unique<WarmupLr>(spec, /*decay=*/false);
    case ScheduleKind::kWarmupDecayLR: return std::make_unique<WarmupLr>(spec, /*decay=*/true);
    case ScheduleKind::kWarmupCosineLR: return std::make_unique<WarmupCosineLr>(spec, base_lr);
    case ScheduleKind::kOneCycle: return std::make_unique<OneCycle>(spec);
  }
  ZT_THROW("unknown scheduler type ", static_cast<int>(spec.type));
}

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kWarmupLR: return "WarmupLR";
    case ScheduleKind::kWarmupDecayLR: return "WarmupDecayLR";
    case ScheduleKind::kWarmupCosineLR: return "WarmupCosineLR";
    case ScheduleKind::kOneCycle: return "OneCycle";
  }
  return "?";
}

}  // namespace zt::optim
