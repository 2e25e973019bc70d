#pragma once
// Learning-rate schedules with DeepSpeed's names, parameters and formulas
// (deepspeed/runtime/lr_schedules.py): WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle.
//
// A schedule is a pure function of DeepSpeed's `last_batch_iteration`: it holds no counter, so
// its checkpoint state is that one integer, which the engine keeps and saves. DeepSpeed's order
// is: construct (last_batch_iteration = -1), then per training step optimizer.step() with the
// current lr, then scheduler.step() (last_batch_iteration += 1). So the optimizer step with
// 0-based index s uses lr_at(s - 1); lr_at(-1) is the lr set at construction.
//
// Parameters (as in a DeepSpeed config's "scheduler": {"type": ..., "params": {...}}):
//   WarmupLR        warmup_min_lr = 0, warmup_max_lr (the config fills the optimizer's lr),
//                   warmup_num_steps = 1000, warmup_type = "log" | "linear"
//   WarmupDecayLR   the same (warmup_max_lr = 0.001) plus total_num_steps (required): linear
//                   decay to 0 at total_num_steps
//   WarmupCosineLR  total_num_steps (required), warmup_min_ratio = 0, warmup_num_steps = 1000,
//                   cos_min_ratio = 1e-4, warmup_type; lr = base_lr * ratio
//   OneCycle        cycle_min_lr, cycle_max_lr (required), decay_lr_rate = 0,
//                   cycle_first_step_size = 2000, cycle_second_step_size = first,
//                   cycle_first_stair_count = 0, cycle_second_stair_count = first stair count,
//                   decay_step_size = 0, cycle_momentum = 1, cycle_min_mom = 0.8,
//                   cycle_max_mom = 0.9, decay_mom_rate = 0
// warmup_num_steps is raised to at least 2, as DeepSpeed does (log warmup divides by log(n)).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace zt::optim {

enum class ScheduleKind { kWarmupLR, kWarmupDecayLR, kWarmupCosineLR, kOneCycle };
enum class WarmupShape { kLog, kLinear };

// DeepSpeed's "scheduler" block, typed: every type's parameters with DeepSpeed's defaults (the
// config reads it as SchedulerConfig, core/config/config.h, and checks the values once,
// core/config/validate.cpp); a schedule reads the parameters of its type only.
struct ScheduleSpec {
  ScheduleKind type = ScheduleKind::kWarmupLR;
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 1e-3;  // the config's WarmupLR takes the optimizer's lr instead
  int64_t warmup_num_steps = 1000;
  WarmupShape warmup_type = WarmupShape::kLog;
  int64_t total_num_steps = 0;
  double warmup_min_ratio = 0.0;
  double cos_min_ratio = 1e-4;
  double cycle_min_lr = 0.0;
  double cycle_max_lr = 0.0;
  double decay_lr_rate = 0.0;
  int64_t cycle_first_step_size = 2000;
  std::optional<int64_t> cycle_second_step_size;  // unset = cycle_first_step_size
  int64_t cycle_first_stair_count = 0;
  std::optional<int64_t> cycle_second_stair_count;  // unset = cycle_first_stair_count
  int64_t decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8;
  double cycle_max_mom = 0.9;
  double decay_mom_rate = 0.0;
};

class LrSchedule {
 public:
  virtual ~LrSchedule();
  // The lr for DeepSpeed's last_batch_iteration == step (see the file comment); step >= -1.
  virtual double lr_at(int64_t step) const = 0;
  // OneCycle with cycle_momentum: the optimizer's betas at that step. DeepSpeed cycles betas[0]
  // between cycle_min_mom and cycle_max_mom (starting at cycle_min_mom) and sets betas[1] to
  // 0.99. nullopt for every other schedule: the optimizer keeps its own betas.
  virtual std::optional<std::pair<double, double>> betas_at(int64_t step) const;
  virtual std::string name() const = 0;
};

// `spec`'s type with its parameters; base_lr: the optimizer's configured lr (WarmupCosineLR's
// lr is base_lr times its ratio). The values are the config's, checked there.
std::unique_ptr<LrSchedule> make_lr_schedule(const ScheduleSpec& spec, double base_lr);

// "WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle".
const char* schedule_name(ScheduleKind kind);

}  // namespace zt::optim
