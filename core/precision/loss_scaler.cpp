#include "core/precision/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace zt {

DynamicLossScaler::DynamicLossScaler(LossScalerOptions options)
    : options_(options), hysteresis_left_(options.hysteresis) {
  ZT_CHECK(options_.loss_scale >= 0, "fp16.loss_scale must be >= 0, got ", options_.loss_scale);
  ZT_CHECK(options_.loss_scale_window >= 1, "fp16.loss_scale_window must be >= 1, got ",
           options_.loss_scale_window);
  ZT_CHECK(options_.hysteresis >= 1, "fp16.hysteresis must be >= 1, got ", options_.hysteresis);
  ZT_CHECK(options_.min_loss_scale > 0, "fp16.min_loss_scale must be > 0, got ",
           options_.min_loss_scale);
  ZT_CHECK(options_.initial_scale_power >= 0 && options_.initial_scale_power < 64,
           "fp16.initial_scale_power must be 0..63, got ", options_.initial_scale_power);
  scale_ = dynamic() ? std::ldexp(1.0, options_.initial_scale_power) : options_.loss_scale;
}

bool DynamicLossScaler::at_minimum() const {
  return dynamic() && (options_.hysteresis == 1 || hysteresis_left_ == 1) &&
         scale_ == options_.min_loss_scale;
}

void DynamicLossScaler::update(bool overflow) {
  if (!dynamic()) {
    ++iteration_;
    return;
  }
  if (overflow) {
    if (options_.hysteresis == 1 || hysteresis_left_ == 1) {
      // DeepSpeed compares for equality: a scale below the minimum (a static-looking start under
      // min_loss_scale) is raised to the minimum instead.
      ZT_CHECK(scale_ != options_.min_loss_scale, "fp16 loss scale is already at its minimum (",
               options_.min_loss_scale, ") and gradients still overflow at iteration ", iteration_);
      scale_ = std::max(scale_ / options_.scale_factor, options_.min_loss_scale);
    } else {
      --hysteresis_left_;
    }
    last_overflow_ = iteration_;
  } else {
    if (options_.consecutive_hysteresis) hysteresis_left_ = options_.hysteresis;
    // Clean iterations since the last overflow, this one excluded: the first doubling comes on
    // the clean iteration after a full window of clean ones.
    const int64_t stable_interval = (iteration_ - last_overflow_) - 1;
    if (stable_interval > 0 && stable_interval % options_.loss_scale_window == 0) {
      if (!options_.consecutive_hysteresis) hysteresis_left_ = options_.hysteresis;
      scale_ *= options_.scale_factor;
    }
  }
  ++iteration_;
}

std::map<std::string, double> DynamicLossScaler::state() const {
  return {{"scale", scale_},
          {"iteration", static_cast<double>(iteration_)},
          {"last_overflow", static_cast<double>(last_overflow_)},
          {"hysteresis_left", static_cast<double>(hysteresis_left_)}};
}

void DynamicLossScaler::load_state(const std::map<std::string, double>& state) {
  for (const char* key : {"scale", "iteration", "last_overflow", "hysteresis_left"}) {
    ZT_CHECK(state.count(key), "loss scaler state lacks '", key, "'");
  }
  scale_ = state.at("scale");
  iteration_ = static_cast<int64_t>(state.at("iteration"));
  last_overflow_ = static_cast<int64_t>(state.at("last_overflow"));
  hysteresis_left_ = static_cast<int>(state.at("hysteresis_left"));
}

}  // namespace zt
