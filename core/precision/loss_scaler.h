#pragma once
// fp16 loss scaling with DeepSpeed's semantics (its DynamicLossScaler.update_scale, used by the
// ZeRO optimizers), so a DeepSpeed fp16 block behaves the same here:
//
//   start:   scale = 2^initial_scale_power (dynamic) or loss_scale (static, when > 0)
//   overflow on iteration i:
//     if hysteresis == 1 (or the counter has run down to 1): scale = max(scale / 2, min_scale);
//        an overflow with scale equal to min_scale raises (the run stops);
//     else the counter is decremented and the scale stays;
//     last_overflow = i
//   clean iteration i:
//     consecutive_hysteresis: the counter is refilled on every clean step;
//     stable = (i - last_overflow) - 1;
//     if stable > 0 and stable % loss_scale_window == 0: scale *= 2 (and, unless consecutive,
//        the counter is refilled)
//   then i += 1 (last_overflow starts at -1: from a fresh start with window w the first doubling
//   happens on iteration w, i.e. after w + 1 clean iterations, as DeepSpeed's stable_interval
//   rule has it)
//
// A static scale never changes; overflowing steps are still skipped.

#include <cstdint>
#include <map>
#include <string>

#include "core/precision/loss_scaler_options.h"

namespace zt {

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(LossScalerOptions options = {});

  double scale() const { return scale_; }
  bool dynamic() const { return options_.loss_scale <= 0; }
  // Applies one iteration's outcome. Throws zt::Error when an overflow happens with the scale
  // already at min_loss_scale (the caller adds which parameters overflowed).
  void update(bool overflow);
  // True when update(true) would throw.
  bool at_minimum() const;

  int64_t iteration() const { return iteration_; }
  int64_t last_overflow_iteration() const { return last_overflow_; }
  int hysteresis_left() const { return hysteresis_left_; }

  // Scale and counters, exactly, for checkpoints.
  std::map<std::string, double> state() const;
  void load_state(const std::map<std::string, double>& state);

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t iteration_ = 0;
  int64_t last_overflow_ = -1;
  int hysteresis_left_;
};

}  // namespace zt
