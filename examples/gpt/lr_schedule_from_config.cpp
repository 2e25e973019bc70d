#include "examples/gpt/lr_schedule_from_config.h"

#include <map>
#include <memory>
#include <string>

#include "optim/lr_schedule.h"

namespace zt::examples {

std::function<double(int64_t)> lr_schedule_from_config(const SchedulerConfig& s, double base_lr) {
  std::map<std::string, double> p;
  std::map<std::string, std::string> text;
  switch (s.type) {
    case SchedulerType::kWarmupDecayLR:
      p["total_num_steps"] = static_cast<double>(s.total_num_steps);
      [[fallthrough]];
    case SchedulerType::kWarmupLR:
      p["warmup_min_lr"] = s.warmup_min_lr;
      p["warmup_max_lr"] = s.warmup_max_lr;
      p["warmup_num_steps"] = static_cast<double>(s.warmup_num_steps);
      text["warmup_type"] = to_string(s.warmup_type);
      break;
    case SchedulerType::kWarmupCosineLR:
      p["total_num_steps"] = static_cast<double>(s.total_num_steps);
      p["warmup_min_ratio"] = s.warmup_min_ratio;
      p["warmup_num_steps"] = static_cast<double>(s.warmup_num_steps);
      p["cos_min_ratio"] = s.cos_min_ratio;
      text["warmup_type"] = to_string(s.warmup_type);
      break;
    case SchedulerType::kOneCycle:
      p = {{"cycle_min_lr", s.cycle_min_lr},
           {"cycle_max_lr", s.cycle_max_lr},
           {"decay_lr_rate", s.decay_lr_rate},
           {"cycle_first_step_size", static_cast<double>(s.cycle_first_step_size)},
           {"cycle_first_stair_count", static_cast<double>(s.cycle_first_stair_count)},
           {"decay_step_size", static_cast<double>(s.decay_step_size)},
           {"cycle_momentum", s.cycle_momentum ? 1.0 : 0.0},
           {"cycle_min_mom", s.cycle_min_mom},
           {"cycle_max_mom", s.cycle_max_mom},
           {"decay_mom_rate", s.decay_mom_rate}};
      if (s.cycle_second_step_size) {
        p["cycle_second_step_size"] = static_cast<double>(*s.cycle_second_step_size);
      }
      if (s.cycle_second_stair_count) {
        p["cycle_second_stair_count"] = static_cast<double>(*s.cycle_second_stair_count);
      }
      break;
  }
  std::shared_ptr<optim::LrSchedule> sched =
      optim::make_lr_schedule(to_string(s.type), p, base_lr, text);
  return [sched](int64_t step) { return sched->lr_at(step - 1); };
}

}  // namespace zt::examples
