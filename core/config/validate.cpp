// Validation of a read and resolved Config: ranges and rules across keys. A key whose value was
// already rejected while reading is not checked again, so each mistake is reported once.
#include <string>

#include "core/base/error.h"
#include "core/config/passes.h"

namespace zt::config_detail {
namespace {

class Validator {
 public:
  Validator(const Config& c, ReadState& st) : c_(c), st_(st) {}

  void run() {
    top();
    zero();
    precision();
    if (c_.optimizer) optimizer(*c_.optimizer);
    if (c_.scheduler) scheduler(*c_.scheduler);
    rest();
  }

 private:
  template <typename... Args>
  void check(const std::string& path, bool ok, const Args&... why) {
    if (!ok && !st_.failed.count(path)) st_.errors.push_back(detail::str(path, ": ", why...));
  }
  template <typename T>
  void at_least(const std::string& path, T value, T min) {
    check(path, value >= min, "must be >= ", min, ", got ", value);
  }
  void fraction(const std::string& path, double value) {
    check(path, value >= 0.0 && value <= 1.0, "must be in [0, 1], got ", value);
  }

  void top() {
    check("gradient_clipping", c_.gradient_clipping >= 0, "must be >= 0 (0 = off), got ",
          c_.gradient_clipping);
    at_least<int64_t>("steps_per_print", c_.steps_per_print, 1);
    at_least<int64_t>("seed", c_.seed, 0);
  }

  void offload(const std::string& path, const OffloadConfig& o, int min_stage, bool params) {
    const int stage = c_.zero_optimization.stage;
    // A rejected stage reads as the default 0; comparing against it would only mislead.
    const bool stage_known = !st_.failed.count("zero_optimization.stage");
    check(path + ".device", o.device == OffloadDevice::kNone || !stage_known || stage >= min_stage,
          "offloading to ", to_string(o.device), " needs zero_optimization.stage >= ", min_stage,
          ", got stage ", stage);
    check(path + ".nvme_path", o.device != OffloadDevice::kNvme || !o.nvme_path.empty(),
          "required when device is nvme");
    at_least<int64_t>(path + ".buffer_count", o.buffer_count, 1);
    if (params) {
      at_least<int64_t>(path + ".buffer_size", o.buffer_size, 1);
      at_least<int64_t>(path + ".max_in_cpu", o.max_in_cpu, 0);
    } else {
      check(path + ".ratio", o.ratio > 0.0 && o.ratio <= 1.0, "must be in (0, 1], got ", o.ratio);
    }
  }

  void zero() {
    const ZeroConfig& z = c_.zero_optimization;
    const std::string p = "zero_optimization.";
    check(p + "stage", z.stage >= 0 && z.stage <= 3, "must be 0..3, got ", z.stage);
    at_least<int64_t>(p + "reduce_bucket_size", z.reduce_bucket_size, 1);
    at_least<int64_t>(p + "allgather_bucket_size", z.allgather_bucket_size, 1);
    at_least<int64_t>(p + "stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size, 0);
    at_least<int64_t>(p + "stage3_param_persistence_threshold",
                      z.stage3_param_persistence_threshold, 0);
    at_least<int64_t>(p + "stage3_max_live_parameters", z.stage3_max_live_parameters, 0);
    at_least<int64_t>(p + "stage3_max_reuse_distance", z.stage3_max_reuse_distance, 0);
    at_least<int64_t>(p + "sub_group_size", z.sub_group_size, 0);
    // ZeRO-Offload moves optimizer states, which exist sharded from stage 1; parameters are
    // sharded (and so offloadable) only at stage 3.
    offload(p + "offload_optimizer", z.offload_optimizer, 1, false);
    offload(p + "offload_param", z.offload_param, 3, true);
  }

  void precision() {
    const Fp16Config& f = c_.fp16;
    check("fp16.enabled", !(f.enabled && c_.bf16.enabled), "fp16 and bf16 cannot both be enabled");
    check("fp16.loss_scale", f.loss_scale >= 0, "must be >= 0 (0 = dynamic), got ", f.loss_scale);
    // 2^63 is already far past any useful scale; larger powers overflow fp32 arithmetic.
    check("fp16.initial_scale_power", f.initial_scale_power >= 0 && f.initial_scale_power <= 63,
          "must be 0..63, got ", f.initial_scale_power);
    at_least<int64_t>("fp16.loss_scale_window", f.loss_scale_window, 1);
    at_least<int64_t>("fp16.hysteresis", f.hysteresis, 1);
    check("fp16.min_loss_scale", f.min_loss_scale > 0, "must be > 0, got ", f.min_loss_scale);
  }

  void optimizer(const OptimizerConfig& o) {
    const std::string p = "optimizer.params.";
    check(p + "lr", o.lr >= 0, "must be >= 0, got ", o.lr);
    check(p + "weight_decay", o.weight_decay >= 0, "must be >= 0, got ", o.weight_decay);
    if (o.type == OptimizerType::kSgd) {
      check(p + "momentum", o.momentum >= 0, "must be >= 0, got ", o.momentum);
      check(p + "dampening", o.dampening >= 0, "must be >= 0, got ", o.dampening);
      check(p + "nesterov", !o.nesterov || (o.momentum > 0 && o.dampening == 0),
            "needs momentum > 0 and dampening 0");
      return;
    }
    if (o.betas.size() != 2) {
      check(p + "betas", false, "expected 2 numbers [beta1, beta2], got ", o.betas.size());
    } else {
      for (double b : o.betas) {
        check(p + "betas", b >= 0 && b < 1, "each beta must be in [0, 1), got ", b);
      }
    }
    check(p + "eps", o.eps > 0, "must be > 0, got ", o.eps);
    if (o.type == OptimizerType::kAdam8bit) at_least<int64_t>(p + "block_size", o.block_size, 1);
  }

  void required(const std::string& path, const char* type) {
    check(path, st_.present.count(path) > 0, "required by ", type);
  }

  void scheduler(const SchedulerConfig& s) {
    const std::string p = "scheduler.params.";
    const char* type = to_string(s.type);
    switch (s.type) {
      case SchedulerType::kWarmupDecayLR:
      case SchedulerType::kWarmupLR:
        check(p + "warmup_min_lr", s.warmup_min_lr >= 0, "must be >= 0, got ", s.warmup_min_lr);
        check(p + "warmup_max_lr", s.warmup_max_lr >= s.warmup_min_lr, "must be >= warmup_min_lr (",
              s.warmup_min_lr, "), got ", s.warmup_max_lr);
        at_least<int64_t>(p + "warmup_num_steps", s.warmup_num_steps, 0);
        if (s.type == SchedulerType::kWarmupDecayLR) total_steps(s, type);
        break;
      case SchedulerType::kWarmupCosineLR:
        at_least<int64_t>(p + "warmup_num_steps", s.warmup_num_steps, 0);
        fraction(p + "warmup_min_ratio", s.warmup_min_ratio);
        fraction(p + "cos_min_ratio", s.cos_min_ratio);
        total_steps(s, type);
        break;
      case SchedulerType::kOneCycle:
        required(p + "cycle_min_lr", type);
        required(p + "cycle_max_lr", type);
        check(p + "cycle_max_lr", s.cycle_max_lr >= s.cycle_min_lr, "must be >= cycle_min_lr (",
              s.cycle_min_lr, "), got ", s.cycle_max_lr);
        at_least<int64_t>(p + "cycle_first_step_size", s.cycle_first_step_size, 1);
        if (s.cycle_second_step_size) {
          at_least<int64_t>(p + "cycle_second_step_size", *s.cycle_second_step_size, 1);
        }
        check(p + "cycle_max_mom", s.cycle_max_mom >= s.cycle_min_mom, "must be >= cycle_min_mom (",
              s.cycle_min_mom, "), got ", s.cycle_max_mom);
        break;
    }
  }

  void total_steps(const SchedulerConfig& s, const char* type) {
    const std::string path = "scheduler.params.total_num_steps";
    required(path, type);
    if (st_.present.count(path)) {
      check(path, s.total_num_steps >= 1 && s.total_num_steps >= s.warmup_num_steps,
            "must be >= 1 and >= warmup_num_steps (", s.warmup_num_steps, "), got ",
            s.total_num_steps);
    }
  }

  void rest() {
    if (c_.activation_checkpointing.number_checkpoints) {
      at_least<int64_t>("activation_checkpointing.number_checkpoints",
                        *c_.activation_checkpointing.number_checkpoints, 1);
    }
    at_least<int64_t>("checkpoint.save_interval", c_.checkpoint.save_interval, 0);
    at_least<int64_t>("checkpoint.keep_last", c_.checkpoint.keep_last, 0);
    check("checkpoint.tag_prefix", !c_.checkpoint.tag_prefix.empty(), "must not be empty");
    at_least<int64_t>("communication.timeout", c_.communication.timeout, 1);

    const DataConfig& d = c_.data;
    at_least<int64_t>("data.max_length", d.max_length, 1);
    at_least<int64_t>("data.max_tokens", d.max_tokens, 0);
    check("data.max_tokens", d.max_tokens == 0 || d.max_tokens >= d.max_length, "a budget of ",
          d.max_tokens, " tokens cannot hold one sample of data.max_length ", d.max_length);
    at_least<int64_t>("data.pad_to_multiple", d.pad_to_multiple, 1);
    at_least<int64_t>("data.mega_batch_mult", d.mega_batch_mult, 1);
    if (d.seed) at_least<int64_t>("data.seed", *d.seed, 0);

    const double llrd = c_.parameter_groups.layer_lr_decay;
    check("parameter_groups.layer_lr_decay", llrd > 0 && llrd <= 1, "must be in (0, 1], got ",
          llrd);
  }

  const Config& c_;
  ReadState& st_;
};

}  // namespace

void validate_config(const Config& config, ReadState& state) {
  Validator(config, state).run();
}

}  // namespace zt::config_detail
