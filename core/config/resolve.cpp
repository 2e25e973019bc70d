// Resolution: "auto" values, the batch triple and defaults that depend on other keys. "auto"
// is resolved as the Hugging Face Trainer does (HfTrainerDeepSpeedConfig): from the program's
// values (CliOptions gives the Trainer's flags and defaults), then from the other fields. Keys
// whose value needs the built model or the step count stay pending (Config::pending_autos)
// until resolve_program_autos; any other "auto" left unresolved is an error naming the key.
#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/config/elasticity.h"
#include "core/config/passes.h"

namespace zt::config_detail {
namespace {

constexpr const char* kTrainBatch = "train_batch_size";
constexpr const char* kMicroBatch = "train_micro_batch_size_per_gpu";
constexpr const char* kAccumulation = "gradient_accumulation_steps";
constexpr const char* kReduceBucket = "zero_optimization.reduce_bucket_size";
constexpr const char* kPrefetchBucket = "zero_optimization.stage3_prefetch_bucket_size";
constexpr const char* kPersistence = "zero_optimization.stage3_param_persistence_threshold";
constexpr const char* kWarmupSteps = "scheduler.params.warmup_num_steps";
constexpr const char* kTotalSteps = "scheduler.params.total_num_steps";

std::string text(bool v) {
  return v ? "true" : "false";
}
std::string text(int64_t v) {
  return std::to_string(v);
}
std::string text(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
std::string text(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + text(v[i]);
  return s + "]";
}

std::string origin_of(const ProgramValues& p, const char* field) {
  auto it = p.origin.find(field);
  return it != p.origin.end() ? it->second : std::string("given by the program");
}

// The model-derived and step-derived values, shared by resolve_config and
// resolve_program_autos. Each returns false when the program does not know yet.
struct ProgramDerived {
  const ProgramValues& p;
  std::optional<int64_t> hidden;  // p.hidden_size, else the config's model.d_model

  bool bucket(const std::string& key, int64_t& out, std::string& why) const {
    if (!hidden) return false;
    const int64_t h = *hidden;
    const std::string hs = "hidden size " + std::to_string(h);
    if (key == kReduceBucket) {
      out = h * h;
      why = "the Trainer's h*h, " + hs;
    } else if (key == kPrefetchBucket) {
      out = static_cast<int64_t>(0.9 * static_cast<double>(h * h));
      why = "the Trainer's int(0.9*h*h), " + hs;
    } else {
      out = 10 * h;
      why = "the Trainer's 10*h, " + hs;
    }
    return true;
  }

  bool total_steps(int64_t& out, std::string& why) const {
    if (!p.total_steps || *p.total_steps <= 0) return false;
    out = *p.total_steps;
    why = origin_of(p, "total_steps");
    return true;
  }

  // The Trainer's get_warmup_steps: warmup_steps if > 0, else ceil(warmup_ratio * total).
  bool warmup_steps(int64_t& out, std::string& why) const {
    if (p.warmup_steps && *p.warmup_steps > 0) {
      out = *p.warmup_steps;
      why = origin_of(p, "warmup_steps");
      return true;
    }
    const double ratio = p.warmup_ratio.value_or(0.0);
    if (ratio == 0.0) {
      out = 0;
      why = "no warmup: " + origin_of(p, "warmup_steps") +
            (p.warmup_ratio ? " and " + origin_of(p, "warmup_ratio") : "");
      return true;
    }
    int64_t total = 0;
    std::string total_why;
    if (!total_steps(total, total_why)) return false;
    out = static_cast<int64_t>(std::ceil(ratio * static_cast<double>(total)));
    why = "ceil(" + origin_of(p, "warmup_ratio") + " * total steps " + std::to_string(total) + ")";
    return true;
  }
};

const char* pending_reason(const std::string& key) {
  if (key == kReduceBucket || key == kPrefetchBucket || key == kPersistence) {
    return "the model's hidden size (zt::initialize, or zt-config --hidden-size)";
  }
  return "the program's step count (--max-steps, or its data length)";
}

class Resolver {
 public:
  Resolver(Config& c, ReadState& st, const ProgramValues& p, int world_size)
      : c_(c), st_(st), p_(p), world_size_(world_size) {}

  void run() {
    c_.world_size = world_size_;
    if (c_.dataloader_drop_last) c_.data.drop_last = true;
    batch();
    precision();
    optimizer_and_scheduler();
    zero_sizes();
    for (const auto& key : c_.pending_autos) {
      st_.auto_notes.push_back(key + ": pending (" + pending_reason(key) + ")");
      // Not checked against ranges until it has a value (validation skips these paths).
      st_.failed.insert(key);
    }
  }

 private:
  bool is_auto(const std::string& path) const { return st_.autos.count(path) > 0; }

  // The ranks the batch triple counts: a group of sequence_parallel_size ranks reads one batch
  // (DeepSpeedConfig divides its world size so), and so does a tensor group (DeepSpeed's batch
  // counts its data-parallel group). A product that does not divide the world is validation's
  // error; the world counts meanwhile.
  int64_t data_parallel_size() const {
    const int split = std::max(c_.sequence_parallel_size, 1) * c_.tensor_parallel.size();
    return split > 1 && world_size_ % split == 0 ? world_size_ / split : world_size_;
  }

  void unresolved(const std::string& path, const std::string& why) {
    st_.errors.push_back(path + ": \"auto\" could not be resolved (" + why + ")");
    st_.failed.insert(path);
  }

  template <typename T>
  void note(const std::string& path, const T& value, const std::string& why) {
    st_.auto_notes.push_back(path + " = " + text(value) + " (\"auto\": " + why + ")");
  }

  // Fills an "auto" field from the program's value, else reports it.
  template <typename T, typename U>
  void from_program(const std::string& path, T& field, const std::optional<U>& value,
                    const char* field_name, const char* why_missing) {
    if (!is_auto(path)) return;
    if (value) {
      field = *value;
      note(path, field, origin_of(p_, field_name));
    } else {
      unresolved(path, why_missing);
    }
  }

  // DeepSpeed's rule (without elasticity): any two of the triple determine the third; one alone is
  // completed with accumulation 1; all three must satisfy train = micro * accumulation *
  // world_size. "auto" takes the Trainer's per-device batch and accumulation; an "auto"
  // train_batch_size is their product with the world size.
  void batch() {
    if (world_size_ < 1) {
      st_.errors.push_back(detail::str("world size must be >= 1, got ", world_size_));
      return;
    }
    if (c_.elasticity.enabled) {
      elastic_batch();
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
    const int64_t ws = data_parallel_size();
    const std::string ranks = ws == world_size_ ? "world size" : "data-parallel size";
    auto divides = [&](int64_t total, int64_t per, const std::string& what) {
      if (total % per == 0) return true;
      st_.errors.push_back(detail::str(kTrainBatch, ": ", total, " is not divisible by ", what,
                                       " (", per, ") with ", ranks, " ", ws));
      return false;
    };
    if (train && micro && accum) {
      if (*train != *micro * *accum * ws) {
        st_.errors.push_back(detail::str(kTrainBatch, ": ", *train, " != ", kMicroBatch, " ",
                                         *micro, " * ", kAccumulation, " ", *accum, " * ", ranks,
                                         " ", ws, " (= ", *micro * *accum * ws, ")"));
        return;
      }
    } else if (train && micro) {
      if (!divides(*train, *micro * ws, "train_micro_batch_size_per_gpu * " + ranks)) return;
      accum = *train / (*micro * ws);
    } else if (train && accum) {
      if (!divides(*train, *accum * ws, "gradient_accumulation_steps * " + ranks)) return;
      micro = *train / (*accum * ws);
    } else if (micro && accum) {
      train = *micro * *accum * ws;
    } else if (train) {
      if (!divides(*train, ws, "the " + ranks)) return;
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
    if (is_auto(kMicroBatch)) note(kMicroBatch, *micro, origin_of(p_, "micro_batch_size"));
    if (is_auto(kAccumulation)) {
      note(kAccumulation, *accum,
           p_.gradient_accumulation_steps ? origin_of(p_, "gradient_accumulation_steps")
                                          : std::string("train_batch_size / (micro * world)"));
    }
    if (is_auto(kTrainBatch)) {
      note(kTrainBatch, *train,
           detail::str("micro ", *micro, " * accumulation ", *accum, " * ",
                       ws == world_size_ ? "world size " : "data-parallel size ", ws));
    }
  }

  // DeepSpeed's runtime with an enabled elasticity block (DeepSpeedConfig.__init__ in
  // deepspeed/runtime/config.py): compute_elastic_config at this world size decides the triple,
  // accumulation = train // (micro * world). Batch keys given beside the block are an error,
  // "auto" ones too, unless ignore_non_elastic_batch_info, which replaces them. One difference:
  // a key holding exactly the elastic value is accepted (DeepSpeed refuses any), so that a
  // resolved config written by to_json() loads again. DeepSpeed's comparison with the scheduler's
  // copy of the block (the DEEPSPEED_ELASTICITY_CONFIG variable) is not made: resolution reads no
  // environment.
  void elastic_batch() {
    const ElasticityConfig& e = c_.elasticity;
    for (const char* key :
         {"enabled", "max_train_batch_size", "micro_batch_sizes", "min_gpus", "max_gpus",
          "min_time", "version", "prefer_larger_batch", "ignore_non_elastic_batch_info",
          "num_gpus_per_node", "model_parallel_size"}) {
      if (st_.failed.count(std::string("elasticity.") + key)) return;  // already reported
    }
    ElasticResult r;
    try {
      r = compute_elastic_config(e, world_size_);
    } catch (const Error& err) {
      st_.errors.push_back(err.message());
      return;
    }
    const int64_t ws = world_size_;
    const int64_t train = r.train_batch_size, micro = *r.micro_batch_size;
    const int64_t accum = train / (micro * ws);
    const std::string elastic = detail::str("train_batch_size ", train, ", micro ", micro,
                                            ", accumulation ", accum, " at world size ", ws);
    const std::pair<const char*, int64_t> keys[] = {
        {kTrainBatch, train}, {kMicroBatch, micro}, {kAccumulation, accum}};
    const int64_t written[] = {c_.train_batch_size, c_.train_micro_batch_size_per_gpu,
                               c_.gradient_accumulation_steps};
    std::string conflicts;
    for (size_t i = 0; i < 3; ++i) {
      const auto& [key, value] = keys[i];
      if (!st_.present.count(key)) continue;
      if (st_.failed.count(key) && !is_auto(key)) continue;  // its value was already rejected
      if (!is_auto(key) && written[i] == value) continue;
      const std::string given = is_auto(key) ? std::string("\"auto\"") : text(written[i]);
      if (e.ignore_non_elastic_batch_info) {
        st_.warnings.push_back(detail::str(key, ": ", given, " replaced by the elastic ", value,
                                           " (elasticity.ignore_non_elastic_batch_info)"));
      } else {
        conflicts += (conflicts.empty() ? "" : ", ") + detail::str(key, " ", given);
      }
    }
    if (!conflicts.empty()) {
      st_.errors.push_back("elasticity: " + conflicts +
                           " given beside an enabled elasticity block, which decides the batch (" +
                           elastic +
                           "); remove them, or set elasticity.ignore_non_elastic_batch_info: "
                           "true to have them replaced");
      return;
    }
    if (train < 1 || accum < 1 || train != micro * accum * ws) {
      st_.errors.push_back(detail::str(kTrainBatch, ": elasticity gives ", elastic,
                                       ", which is not a batch (each must be >= 1 and train = ",
                                       "micro * accumulation * world size)"));
      return;
    }
    c_.train_batch_size = train;
    c_.train_micro_batch_size_per_gpu = micro;
    c_.gradient_accumulation_steps = accum;
    const std::string why = detail::str("elasticity at world size ", ws);
    for (size_t i = 0; i < 3; ++i) {
      if (is_auto(keys[i].first)) note(keys[i].first, keys[i].second, why);
    }
  }

  void precision() {
    from_program("gradient_clipping", c_.gradient_clipping, p_.gradient_clipping,
                 "gradient_clipping", "the program gives no gradient clipping");
    from_program("fp16.enabled", c_.fp16.enabled, p_.fp16, "fp16", "the program does not say");
    from_program("bf16.enabled", c_.bf16.enabled, p_.bf16, "bf16", "the program does not say");
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
      const std::string lr_key = "optimizer.params.lr";
      if (is_auto(lr_key)) {
        if (lr) {
          o.lr = *lr;
          note(lr_key, o.lr, origin_of(p_, "lr"));
        } else if (auto peak = scheduler_peak_lr()) {
          o.lr = *peak;
          note(lr_key, o.lr, "the scheduler's peak LR");
        } else {
          unresolved(lr_key, "the program gives no learning rate and the scheduler no peak LR");
        }
      }
      if (!lr && st_.present.count(lr_key) && !st_.failed.count(lr_key)) lr = o.lr;
      from_program("optimizer.params.betas", o.betas, p_.betas, "betas",
                   "the program gives no betas");
      from_program("optimizer.params.eps", o.eps, p_.eps, "eps", "the program gives no eps");
      from_program("optimizer.params.weight_decay", o.weight_decay, p_.weight_decay, "weight_decay",
                   "the program gives no weight decay");
    }
    if (c_.scheduler) {
      SchedulerConfig& s = *c_.scheduler;
      // DeepSpeed's WarmupLR without warmup_max_lr warms up to the optimizer's lr (its
      // WarmupDecayLR keeps 0.001).
      const std::optional<double> optimizer_lr =
          c_.optimizer && st_.given("optimizer.params.lr") ? std::optional(c_.optimizer->lr) : lr;
      if (s.type == SchedulerType::kWarmupLR && optimizer_lr &&
          !st_.present.count("scheduler.params.warmup_max_lr")) {
        s.warmup_max_lr = *optimizer_lr;
      }
      // The Trainer sets an "auto" minimum LR to 0.
      if (is_auto("scheduler.params.warmup_min_lr")) {
        s.warmup_min_lr = 0.0;
        note("scheduler.params.warmup_min_lr", 0.0, "the Trainer's 0");
      }
      auto lr_for = [&](const char* key, double& field) {
        if (!is_auto(key)) return;
        if (!lr) {
          unresolved(key, "neither the program nor optimizer.params.lr gives a learning rate");
          return;
        }
        field = *lr;
        note(key, field, p_.lr ? origin_of(p_, "lr") : std::string("optimizer.params.lr"));
      };
      lr_for("scheduler.params.warmup_max_lr", s.warmup_max_lr);
      lr_for("scheduler.params.cycle_max_lr", s.cycle_max_lr);
      const ProgramDerived derived{p_, std::nullopt};
      std::string why;
      if (is_auto(kWarmupSteps)) {
        if (derived.warmup_steps(s.warmup_num_steps, why)) {
          note(kWarmupSteps, s.warmup_num_steps, why);
        } else {
          c_.pending_autos.push_back(kWarmupSteps);
        }
      }
      if (is_auto(kTotalSteps)) {
        if (derived.total_steps(s.total_num_steps, why)) {
          note(kTotalSteps, s.total_num_steps, why);
        } else {
          c_.pending_autos.push_back(kTotalSteps);
        }
      }
    }
  }

  // Bucket sizes from the hidden size, as the Trainer sets them; pending without one.
  void zero_sizes() {
    ZeroConfig& z = c_.zero_optimization;
    std::optional<int64_t> hidden = p_.hidden_size;
    if (!hidden && !p_.hidden_size_key.empty()) hidden = hidden_from_key();
    const ProgramDerived derived{p_, hidden};
    for (auto [key, field] :
         {std::pair<const char*, int64_t*>{kReduceBucket, &z.reduce_bucket_size},
          std::pair<const char*, int64_t*>{kPrefetchBucket, &z.stage3_prefetch_bucket_size},
          std::pair<const char*, int64_t*>{kPersistence, &z.stage3_param_persistence_threshold}}) {
      if (!is_auto(key)) continue;
      std::string why;
      if (derived.bucket(key, *field, why)) {
        note(key, *field, why);
      } else {
        c_.pending_autos.push_back(key);
      }
    }
    // Written "auto" in some Hugging Face configs though the Trainer leaves them alone (so
    // DeepSpeed itself would reject them): DeepSpeed's defaults.
    const ZeroConfig defaults;
    const std::string live = "zero_optimization.stage3_max_live_parameters";
    if (is_auto(live)) {
      z.stage3_max_live_parameters = defaults.stage3_max_live_parameters;
      note(live, z.stage3_max_live_parameters, "DeepSpeed's default");
    }
    const std::string reuse = "zero_optimization.stage3_max_reuse_distance";
    if (is_auto(reuse)) {
      z.stage3_max_reuse_distance = defaults.stage3_max_reuse_distance;
      note(reuse, z.stage3_max_reuse_distance, "DeepSpeed's default");
    }
    // Accelerate fills it from its zero3_save_16bit_model option (default false).
    const std::string gather = "zero_optimization.stage3_gather_16bit_weights_on_model_save";
    if (is_auto(gather)) {
      z.stage3_gather_16bit_weights_on_model_save = p_.save_16bit_model.value_or(false);
      note(gather, z.stage3_gather_16bit_weights_on_model_save,
           p_.save_16bit_model ? origin_of(p_, "save_16bit_model")
                               : std::string("Accelerate's zero3_save_16bit_model default"));
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

namespace zt {

std::vector<std::string> resolve_program_autos(Config& config, const ProgramValues& program) {
  using namespace config_detail;
  std::vector<std::string> notes;
  std::vector<std::string> still;
  std::optional<int64_t> hidden = program.hidden_size;
  if (!hidden && !program.hidden_size_key.empty()) {
    // "<block>.<key>" of a program block (a bad value was reported when the config loaded).
    const std::string& path = program.hidden_size_key;
    const size_t dot = path.find('.');
    if (dot != std::string::npos) {
      const ProgramBlock block = config.program_block(path.substr(0, dot));
      const std::string key = path.substr(dot + 1);
      if (block.has(key)) {
        int64_t h = 0;
        ProgramBlockReader reader(block);
        reader.field(key.c_str(), h);
        if (reader.errors().empty()) hidden = h;
      }
    }
  }
  const ProgramDerived derived{program, hidden};
  ZeroConfig& z = config.zero_optimization;
  for (const auto& key : config.pending_autos) {
    int64_t value = 0;
    std::string why;
    bool done = false;
    if (key == kReduceBucket || key == kPrefetchBucket || key == kPersistence) {
      done = derived.bucket(key, value, why);
      if (done) {
        (key == kReduceBucket     ? z.reduce_bucket_size
         : key == kPrefetchBucket ? z.stage3_prefetch_bucket_size
                                  : z.stage3_param_persistence_threshold) = value;
      }
    } else if (config.scheduler && key == kWarmupSteps) {
      done = derived.warmup_steps(value, why);
      if (done) config.scheduler->warmup_num_steps = value;
    } else if (config.scheduler && key == kTotalSteps) {
      done = derived.total_steps(value, why);
      if (done) config.scheduler->total_num_steps = value;
    }
    if (done) {
      notes.push_back(key + " = " + std::to_string(value) + " (\"auto\": " + why + ")");
    } else {
      still.push_back(key);
    }
  }
  config.pending_autos = still;
  return notes;
}

}  // namespace zt
