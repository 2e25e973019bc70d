// Resolution: "auto" values, the batch triple and defaults that depend on other keys. "auto"
// is resolved as the Hugging Face integration does: from the program's values first, then from
// the other fields; what stays unresolved is an error naming the key.
#include <cmath>
#include <optional>
#include <string>

#include "core/base/error.h"
#include "core/config/passes.h"

namespace zt::config_detail {
namespace {

constexpr const char* kTrainBatch = "train_batch_size";
constexpr const char* kMicroBatch = "train_micro_batch_size_per_gpu";
constexpr const char* kAccumulation = "gradient_accumulation_steps";

class Resolver {
 public:
  Resolver(Config& c, ReadState& st, const ProgramValues& p, int world_size)
      : c_(c), st_(st), p_(p), world_size_(world_size) {}

  void run() {
    c_.world_size = world_size_;
    batch();
    precision();
    optimizer_and_scheduler();
    zero_sizes();
  }

 private:
  bool is_auto(const std::string& path) const { return st_.autos.count(path) > 0; }

  void unresolved(const std::string& path, const std::string& why) {
    st_.errors.push_back(path + ": \"auto\" could not be resolved (" + why + ")");
    st_.failed.insert(path);
  }

  // Fills an "auto" field from the program's value, else reports it.
  template <typename T, typename U>
  void from_program(const std::string& path, T& field, const std::optional<U>& value,
                    const char* why) {
    if (!is_auto(path)) return;
    if (value) {
      field = *value;
    } else {
      unresolved(path, why);
    }
  }

  // DeepSpeed's rule: any two of the triple determine the third; one alone is completed with
  // accumulation 1; all three must satisfy train = micro * accumulation * world_size.
  void batch() {
    if (world_size_ < 1) {
      st_.errors.push_back(detail::str("world size must be >= 1, got ", world_size_));
      return;
    }
    if (st_.failed.count(kTrainBatch) || st_.failed.count(kMicroBatch) ||
        st_.failed.count(kAccumulation)) {
      return;  // already reported; a derived complaint would only repeat it
    }
    std::optional<int64_t> train, micro, accum;
    if (st_.given(kTrainBatch)) train = c_.train_batch_size;
    if (st_.given(kMicroBatch)) micro = c_.train_micro_batch_size_per_gpu;
    if (is_auto(kMicroBatch) && p_.micro_batch_size) micro = *p_.micro_batch_size;
    if (st_.given(kAccumulation)) accum = c_.gradient_accumulation_steps;
    if (is_auto(kAccumulation) && p_.gradient_accumulation_steps) {
      accum = *p_.gradient_accumulation_steps;
    }
    bool ok = true;
    for (auto [name, v] : {std::pair{kTrainBatch, train}, std::pair{kMicroBatch, micro},
                           std::pair{kAccumulation, accum}}) {
      if (v && *v < 1) {
        st_.errors.push_back(detail::str(name, ": must be >= 1, got ", *v));
        ok = false;
      }
    }
    if (!ok) return;
    const int64_t ws = world_size_;
    auto divides = [&](int64_t total, int64_t per, const char* what) {
      if (total % per == 0) return true;
      st_.errors.push_back(detail::str(kTrainBatch, ": ", total, " is not divisible by ", what,
                                       " (", per, ") with world size ", ws));
      return false;
    };
    if (train && micro && accum) {
      if (*train != *micro * *accum * ws) {
        st_.errors.push_back(detail::str(kTrainBatch, ": ", *train, " != ", kMicroBatch, " ",
                                         *micro, " * ", kAccumulation, " ", *accum,
                                         " * world size ", ws, " (= ", *micro * *accum * ws, ")"));
        return;
      }
    } else if (train && micro) {
      if (!divides(*train, *micro * ws, "train_micro_batch_size_per_gpu * world size")) return;
      accum = *train / (*micro * ws);
    } else if (train && accum) {
      if (!divides(*train, *accum * ws, "gradient_accumulation_steps * world size")) return;
      micro = *train / (*accum * ws);
    } else if (micro && accum) {
      train = *micro * *accum * ws;
    } else if (train) {
      if (!divides(*train, ws, "the world size")) return;
      accum = 1;
      micro = *train / ws;
    } else if (micro) {
      accum = 1;
      train = *micro * ws;
    } else {
      bool any_auto = false;
      for (const char* key : {kTrainBatch, kMicroBatch, kAccumulation}) {
        if (is_auto(key)) {
          any_auto = true;
          unresolved(key, "give train_micro_batch_size_per_gpu, or two of the batch keys");
        }
      }
      if (!any_auto) {
        st_.errors.push_back(
            detail::str(kTrainBatch, ": give ", kTrainBatch, " or ", kMicroBatch, " (or both)"));
      }
      return;
    }
    c_.train_batch_size = *train;
    c_.train_micro_batch_size_per_gpu = *micro;
    c_.gradient_accumulation_steps = *accum;
  }

  void precision() {
    from_program("gradient_clipping", c_.gradient_clipping, p_.gradient_clipping,
                 "the program gives no gradient clipping");
    from_program("fp16.enabled", c_.fp16.enabled, p_.fp16, "the program does not say");
    from_program("bf16.enabled", c_.bf16.enabled, p_.bf16, "the program does not say");
  }

  // The scheduler's peak LR, when written out (the optimizer's lr may follow it).
  std::optional<double> scheduler_peak_lr() const {
    if (!c_.scheduler) return std::nullopt;
    if (c_.scheduler->type == SchedulerType::kOneCycle) {
      if (st_.given("scheduler.params.cycle_max_lr")) return c_.scheduler->cycle_max_lr;
    } else if (c_.scheduler->type != SchedulerType::kWarmupCosineLR &&
               st_.given("scheduler.params.warmup_max_lr")) {
      return c_.scheduler->warmup_max_lr;
    }
    return std::nullopt;
  }

  void optimizer_and_scheduler() {
    std::optional<double> lr = p_.lr;
    if (c_.optimizer) {
      OptimizerConfig& o = *c_.optimizer;
      if (is_auto("optimizer.params.lr")) {
        std::optional<double> v = lr ? lr : scheduler_peak_lr();
        from_program("optimizer.params.lr", o.lr, v,
                     "the program gives no learning rate and the scheduler no peak LR");
      }
      const std::string lr_key = "optimizer.params.lr";
      if (!lr && st_.present.count(lr_key) && !st_.failed.count(lr_key)) lr = o.lr;
      from_program("optimizer.params.betas", o.betas, p_.betas, "the program gives no betas");
      from_program("optimizer.params.eps", o.eps, p_.eps, "the program gives no eps");
      from_program("optimizer.params.weight_decay", o.weight_decay, p_.weight_decay,
                   "the program gives no weight decay");
    }
    if (c_.scheduler) {
      SchedulerConfig& s = *c_.scheduler;
      // The Hugging Face integration sets an "auto" minimum LR to 0.
      if (is_auto("scheduler.params.warmup_min_lr")) s.warmup_min_lr = 0.0;
      from_program("scheduler.params.warmup_max_lr", s.warmup_max_lr, lr,
                   "neither the program nor optimizer.params.lr gives a learning rate");
      from_program("scheduler.params.cycle_max_lr", s.cycle_max_lr, lr,
                   "neither the program nor optimizer.params.lr gives a learning rate");
      from_program("scheduler.params.warmup_num_steps", s.warmup_num_steps, p_.warmup_steps,
                   "the program gives no warmup steps");
      from_program("scheduler.params.total_num_steps", s.total_num_steps, p_.total_steps,
                   "the program gives no total steps");
    }
  }

  // Bucket sizes from the hidden size, as the Hugging Face integration sets them.
  void zero_sizes() {
    ZeroConfig& z = c_.zero_optimization;
    std::optional<int64_t> hidden = p_.hidden_size;
    std::string why = "no hidden size: the program gives none; give a number";
    if (!hidden && !p_.hidden_size_key.empty()) {
      hidden = hidden_from_key();
      why = "no hidden size: the config has no " + p_.hidden_size_key + "; give a number";
    }
    const std::optional<int64_t> h2 =
        hidden ? std::optional<int64_t>(*hidden * *hidden) : std::nullopt;
    from_program("zero_optimization.reduce_bucket_size", z.reduce_bucket_size, h2, why.c_str());
    from_program(
        "zero_optimization.stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size,
        h2 ? std::optional<int64_t>(static_cast<int64_t>(std::llround(0.9 * *h2))) : std::nullopt,
        why.c_str());
    from_program("zero_optimization.stage3_param_persistence_threshold",
                 z.stage3_param_persistence_threshold,
                 hidden ? std::optional<int64_t>(10 * *hidden) : std::nullopt, why.c_str());
    // Written "auto" in some Hugging Face configs though the integration leaves them alone:
    // DeepSpeed's defaults.
    const ZeroConfig defaults;
    if (is_auto("zero_optimization.stage3_max_live_parameters")) {
      z.stage3_max_live_parameters = defaults.stage3_max_live_parameters;
    }
    if (is_auto("zero_optimization.stage3_max_reuse_distance")) {
      z.stage3_max_reuse_distance = defaults.stage3_max_reuse_distance;
    }
    // Accelerate fills it from its zero3_save_16bit_model option (default false).
    const std::string gather = "zero_optimization.stage3_gather_16bit_weights_on_model_save";
    if (is_auto(gather)) {
      z.stage3_gather_16bit_weights_on_model_save = p_.save_16bit_model.value_or(false);
    }
    // DeepSpeed turns overlap_comm on by default at stage 3 only.
    if (!st_.present.count("zero_optimization.overlap_comm")) z.overlap_comm = z.stage == 3;
  }

  // The integer at p_.hidden_size_key ("<block>.<key>") of a program block, when there.
  std::optional<int64_t> hidden_from_key() {
    const std::string& path = p_.hidden_size_key;
    const size_t dot = path.find('.');
    if (dot == std::string::npos) return std::nullopt;
    const std::string key = path.substr(dot + 1);
    const ProgramBlock block = c_.program_block(path.substr(0, dot));
    if (!block.has(key)) return std::nullopt;
    int64_t h = 0;
    ProgramBlockReader reader(block);
    reader.field(key.c_str(), h);
    if (!reader.errors().empty()) {
      st_.errors.insert(st_.errors.end(), reader.errors().begin(), reader.errors().end());
      return std::nullopt;
    }
    return h;
  }

  Config& c_;
  ReadState& st_;
  const ProgramValues& p_;
  int world_size_;
};

}  // namespace

void resolve_config(Config& config, ReadState& state, const ProgramValues& program,
                    int world_size) {
  Resolver(config, state, program, world_size).run();
}

}  // namespace zt::config_detail
