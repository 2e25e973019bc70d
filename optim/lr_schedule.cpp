#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "base/error.h"
#include "base/logging.h"

namespace zt::optim {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Reads parameters by name with defaults, remembering which were consumed so that unknown ones
// can be reported.
class Params {
 public:
  Params(const std::string& type, const std::map<std::string, double>& values,
         const std::map<std::string, std::string>& text)
      : type_(type), values_(values), text_(text) {}

  double get(const std::string& key, double fallback) {
    used_.insert(key);
    auto it = values_.find(key);
    return it == values_.end() ? fallback : it->second;
  }
  double required(const std::string& key) {
    used_.insert(key);
    auto it = values_.find(key);
    ZT_CHECK(it != values_.end(), "scheduler.params.", key, " is required by ", type_);
    return it->second;
  }
  bool has(const std::string& key) const { return values_.count(key) != 0; }
  int64_t integer(const std::string& key, double fallback, int64_t min_value) {
    const double v = get(key, fallback);
    ZT_CHECK(v == std::floor(v) && v >= static_cast<double>(min_value), "scheduler.params.", key,
             " must be an integer >= ", min_value, ", got ", v);
    return static_cast<int64_t>(v);
  }
  std::string text(const std::string& key, const std::string& fallback) {
    used_.insert(key);
    auto it = text_.find(key);
    return it == text_.end() ? fallback : it->second;
  }
  void check_all_used() const {
    for (const auto& [k, v] : values_) {
      ZT_CHECK(used_.count(k), "scheduler.params.", k, " is not a parameter of ", type_);
    }
    for (const auto& [k, v] : text_) {
      ZT_CHECK(used_.count(k), "scheduler.params.", k, " is not a parameter of ", type_);
    }
  }

 private:
  std::string type_;
  const std::map<std::string, double>& values_;
  const std::map<std::string, std::string>& text_;
  std::set<std::string> used_;
};

// The warm-up fraction in [0, 1) of DeepSpeed's _get_gamma for step < warmup_num_steps.
struct Warmup {
  int64_t num_steps = 1000;  // already max(2, configured)
  bool log = true;
  double fraction(int64_t step) const {
    if (log)
      return std::log(static_cast<double>(step + 1)) / std::log(static_cast<double>(num_steps));
    return static_cast<double>(step) / static_cast<double>(num_steps);
  }
};

Warmup read_warmup(Params& p) {
  Warmup w;
  // DeepSpeed's WarmupLR takes max(2, warmup_num_steps), so 0 (what the Hugging Face Trainer
  // writes for "auto" with its default warmup_steps 0) is accepted and means 2.
  w.num_steps = std::max<int64_t>(2, p.integer("warmup_num_steps", 1000, 0));
  const std::string type = p.text("warmup_type", "log");
  ZT_CHECK(type == "log" || type == "linear",
           "scheduler.params.warmup_type must be log or linear, got \"", type, "\"");
  w.log = type == "log";
  return w;
}

class WarmupLr : public LrSchedule {
 public:
  WarmupLr(Params& p, double base_lr, bool decay) : decay_(decay) {
    if (decay_) {
      p.required("total_num_steps");
      total_num_steps_ = p.integer("total_num_steps", 0, 0);
    }
    min_lr_ = p.get("warmup_min_lr", 0.0);
    max_lr_ = p.get("warmup_max_lr", decay_ ? 0.001 : base_lr);
    warmup_ = read_warmup(p);
    ZT_CHECK(min_lr_ >= 0 && max_lr_ >= 0,
             "scheduler.params.warmup_min_lr/warmup_max_lr must be >= 0, got ", min_lr_, " and ",
             max_lr_);
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
  WarmupCosineLr(Params& p, double base_lr) : base_lr_(base_lr) {
    p.required("total_num_steps");
    total_num_steps_ = p.integer("total_num_steps", 0, 0);
    warmup_min_ratio_ = p.get("warmup_min_ratio", 0.0);
    cos_min_ratio_ = p.get("cos_min_ratio", 1e-4);
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
  explicit OneCycle(Params& p) {
    min_lr_ = p.required("cycle_min_lr");
    max_lr_ = p.required("cycle_max_lr");
    decay_lr_rate_ = p.get("decay_lr_rate", 0.0);
    first_ = p.get("cycle_first_step_size", 2000);
    second_ = p.get("cycle_second_step_size", first_);
    ZT_CHECK(first_ > 0 && second_ > 0,
             "scheduler.params.cycle_first_step_size/cycle_second_step_size must be > 0, got ",
             first_, " and ", second_);
    first_stairs_ = p.integer("cycle_first_stair_count", 0, 0);
    second_stairs_ = p.integer("cycle_second_stair_count", static_cast<double>(first_stairs_), 0);
    decay_step_size_ = p.get("decay_step_size", 0.0);
    ZT_CHECK(decay_step_size_ >= 0, "scheduler.params.decay_step_size must be >= 0, got ",
             decay_step_size_);
    cycle_momentum_ = p.get("cycle_momentum", 1.0) != 0;
    min_mom_ = p.get("cycle_min_mom", 0.8);
    max_mom_ = p.get("cycle_max_mom", 0.9);
    decay_mom_rate_ = p.get("decay_mom_rate", 0.0);
    // DeepSpeed: no decay step size means no decay at all; a zero rate disables that decay.
    skip_lr_decay_ = decay_step_size_ == 0 || decay_lr_rate_ == 0;
    skip_mom_decay_ = decay_step_size_ == 0 || decay_mom_rate_ == 0;
  }
  double lr_at(int64_t step) const override {
    if (static_cast<double>(step) < total()) return min_lr_ + (max_lr_ - min_lr_) * scale(step);
    if (skip_lr_decay_) return min_lr_;
    return min_lr_ / (1 + decay_lr_rate_ * decay_interval(step));
  }
  std::optional<double> beta1_at(int64_t step) const override {
    if (!cycle_momentum_) return std::nullopt;
    if (static_cast<double>(step) < total()) return max_mom_ - (max_mom_ - min_mom_) * scale(step);
    if (skip_mom_decay_) return max_mom_;
    return max_mom_ * (1 + decay_mom_rate_ * decay_interval(step));
  }
  std::string name() const override { return "OneCycle"; }

 private:
  double total() const { return first_ + second_; }
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

std::optional<double> LrSchedule::beta1_at(int64_t) const {
  return std::nullopt;
}

std::unique_ptr<LrSchedule> make_lr_schedule(
    const std::string& type, const std::map<std::string, double>& params, double base_lr,
    const std::map<std::string, std::string>& text_params) {
  Params p(type, params, text_params);
  std::unique_ptr<LrSchedule> s;
  if (type == "WarmupLR") {
    s = std::make_unique<WarmupLr>(p, base_lr, /*decay=*/false);
  } else if (type == "WarmupDecayLR") {
    s = std::make_unique<WarmupLr>(p, base_lr, /*decay=*/true);
  } else if (type == "WarmupCosineLR") {
    s = std::make_unique<WarmupCosineLr>(p, base_lr);
  } else if (type == "OneCycle") {
    s = std::make_unique<OneCycle>(p);
  } else {
    ZT_THROW("scheduler.type must be WarmupLR, WarmupDecayLR, WarmupCosineLR or OneCycle, got \"",
             type, "\"");
  }
  p.check_all_used();
  return s;
}

}  // namespace zt::optim
