#pragma once
// The fp16 loss scaler's options (DeepSpeed's fp16 block), apart from the scaler
// (core/precision/loss_scaler.h) so that the config and the engine's options include no more.

#include <cstdint>

namespace zt {

struct LossScalerOptions {
  double loss_scale = 0.0;  // > 0: static scale
  int initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;
  double scale_factor = 2.0;
};

}  // namespace zt
