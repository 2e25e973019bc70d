#pragma once
// The config's scheduler as the engine's lr_schedule, passing optim::make_lr_schedule only the
// parameters the scheduler type takes. Works around core/engine_config.cpp, whose
// schedule_from() passes every SchedulerConfig field to every type, which make_lr_schedule
// rejects ("scheduler.params.cycle_first_stair_count is not a parameter of WarmupCosineLR").
// Remove once engine_options_from_config is fixed.

#include <cstdint>
#include <functional>

#include "core/config.h"

namespace zt::examples {

// Optimizer step -> lr, in DeepSpeed's order (step s runs with lr_at(s - 1)).
std::function<double(int64_t)> lr_schedule_from_config(const SchedulerConfig& s, double base_lr);

}  // namespace zt::examples
