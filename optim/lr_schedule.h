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
//   WarmupLR        warmup_min_lr = 0, warmup_max_lr = base_lr, warmup_num_steps = 1000,
//                   warmup_type = "log" | "linear"
//   WarmupDecayLR   the same plus total_num_steps (required): linear decay to 0 at total_num_steps
//   WarmupCosineLR  total_num_steps (required), warmup_min_ratio = 0, warmup_num_steps = 1000,
//                   cos_min_ratio = 1e-4, warmup_type; lr = base_lr * ratio
//   OneCycle        cycle_min_lr, cycle_max_lr (required), decay_lr_rate = 0,
//                   cycle_first_step_size = 2000, cycle_second_step_size = first,
//                   cycle_first_stair_count = 0, cycle_second_stair_count = first stair count,
//                   decay_step_size = 0, cycle_momentum = 1, cycle_min_mom = 0.8,
//                   cycle_max_mom = 0.9, decay_mom_rate = 0
// warmup_num_steps is raised to at least 2, as DeepSpeed does (log warmup divides by log(n)).

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace zt::optim {

class LrSchedule {
 public:
  virtual ~LrSchedule();
  // The lr for DeepSpeed's last_batch_iteration == step (see the file comment); step >= -1.
  virtual double lr_at(int64_t step) const = 0;
  // OneCycle with cycle_momentum: Adam's beta1 at that step (DeepSpeed cycles betas[0]); nullopt
  // for every other schedule.
  virtual std::optional<double> beta1_at(int64_t step) const;
  virtual std::string name() const = 0;
};

// type: WarmupLR, WarmupDecayLR, WarmupCosineLR or OneCycle. params: the numeric parameters
// above; text_params: the textual ones (warmup_type). base_lr: the optimizer's configured lr.
// Unknown parameter names and out-of-range values are zt::Errors naming the parameter.
std::unique_ptr<LrSchedule> make_lr_schedule(
    const std::string& type, const std::map<std::string, double>& params, double base_lr,
    const std::map<std::string, std::string>& text_params = {});

}  // namespace zt::optim
