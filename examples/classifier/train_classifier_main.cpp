// train_classifier: fine-tunes the GPT trunk (as an encoder, readability_regressor.h) to predict
// the Flesch-Kincaid grade of a text (readability.h), CommonLit-style regression on
// variable-length text, with zt::Engine.
//
//   ztrun --standalone --nproc-per-node 2 build/bin/train_classifier
//       --config configs/classifier_zero2.yaml --train-shard fk_train.ztt
//       --valid-shard fk_valid.ztt --batching smart --out-dir out/smart
//
// --batching (default: data.bucketing):
//   smart   LengthBucketedSampler + dynamic padding (each batch padded to its longest sample)
//   random  RandomBatchSampler + dynamic padding
//   fixed   RandomBatchSampler, every batch padded to data.max_length
// Rank 0 prints a progress line and writes <out-dir>/metrics.jsonl (one object per optimizer
// step) and <out-dir>/summary.json (time, tokens/s, padding fraction, validation RMSE in grade
// levels before and after training, and of always predicting the training mean).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>

#include <torch/torch.h>

#include "core/base/logging.h"
#include "core/base/main_guard.h"
#include "core/config/cli_options.h"
#include "core/engine.h"
#include "core/config/engine_config.h"
#include "data/batch_sampler.h"
#include "data/collator.h"
#include "data/loader.h"
#include "data/token_dataset.h"
#include "examples/classifier/readability_regressor.h"
#include "examples/common/freeze_parameters.h"
#include "examples/common/metrics_log.h"
#include "examples/common/parameter_snapshot.h"
#include "examples/common/rank_sum.h"
#include "parallel/dist.h"

namespace po = boost::program_options;

namespace zt::examples {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

enum class Batching { kSmart, kRandom, kFixed };

Batching parse_batching(const std::string& s, bool config_bucketing) {
  if (s.empty()) return config_bucketing ? Batching::kSmart : Batching::kRandom;
  if (s == "smart") return Batching::kSmart;
  if (s == "random") return Batching::kRandom;
  if (s == "fixed") return Batching::kFixed;
  ZT_THROW("train_classifier: --batching must be smart, random or fixed, got '", s, "'");
}

const char* to_string(Batching b) {
  switch (b) {
    case Batching::kSmart: return "smart";
    case Batching::kRandom: return "random";
    case Batching::kFixed: return "fixed";
  }
  return "?";
}

// The target of every sample in grade levels, and its standardization (the model predicts
// (grade - mean) / std, so the head starts on the right scale).
struct Targets {
  int64_t field = 0;  // label column in the shard
  double mean = 0, stddev = 1;
};

Targets targets_of(const data::TokenDataset& ds, const std::string& field) {
  Targets t;
  const auto& fields = ds.label_fields();
  auto it = std::find(fields.begin(), fields.end(), field);
  ZT_CHECK(it != fields.end(), "shard ", ds.path(), " has no label field '", field,
           "' (make it with zt-readability-corpus and zt-pretokenize --label-fields ", field, ")");
  t.field = it - fields.begin();
  double sum = 0, sum_sq = 0;
  for (int64_t i = 0; i < ds.size(); ++i) {
    const double g = static_cast<double>(ds.labels(i)[t.field]) / 100.0;
    sum += g;
    sum_sq += g * g;
  }
  const double n = static_cast<double>(ds.size());
  t.mean = sum / n;
  t.stddev = std::sqrt(std::max(1e-12, sum_sq / n - t.mean * t.mean));
  return t;
}

// Grades (B,) fp32 of a batch, from its sample_labels (B, num_label_fields) in hundredths.
torch::Tensor grades(const data::Batch& b, const Targets& t) {
  return b.sample_labels.select(1, t.field).to(torch::kFloat) / 100.0;
}

// Batches of one shard for this rank, epochs chained.
class BatchStream {
 public:
  BatchStream(const std::string& path, const Config& c, int64_t max_len, Batching mode,
              const dist::Communicator& comm, bool training)
      : ds_(path) {
    const DataConfig& d = c.data;
    // fixed: padding every batch to max_len is rounding its length up to a multiple of max_len.
    const int64_t pad_multiple = mode == Batching::kFixed ? max_len : d.pad_to_multiple;
    data::SamplerOptions so;
    so.max_tokens = d.max_tokens;
    so.batch_size = d.max_tokens > 0 ? 0 : c.train_micro_batch_size_per_gpu;
    so.mega_batch_mult = d.mega_batch_mult;
    so.seed = static_cast<uint64_t>(d.seed.value_or(c.seed)) + (training ? 0 : 1);
    so.tail = d.drop_last && training ? data::TailPolicy::kDrop : data::TailPolicy::kPadByRepeat;
    so.rank = comm.rank();
    so.world_size = comm.size();
    so.max_length = max_len;
    so.pad_to_multiple = pad_multiple;
    if (mode == Batching::kSmart) {
      sampler_ = std::make_unique<data::LengthBucketedSampler>(ds_.lengths(), so);
    } else {
      sampler_ = std::make_unique<data::RandomBatchSampler>(ds_.lengths(), so);
    }
    data::CollatorOptions co;
    co.pad_id = 0;
    co.pad_to_multiple = pad_multiple;
    co.max_length = max_len;
    loader_ = std::make_unique<data::Loader>(ds_, *sampler_, data::Collator(co),
                                             data::LoaderOptions{.num_workers = 1});
    loader_->set_epoch(0);
  }
  // Next batch; a new epoch starts when this one is exhausted (wrap), or nullopt.
  std::optional<data::Batch> next(bool wrap) {
    auto b = loader_->next();
    if (b || !wrap) return b;
    loader_->set_epoch(++epoch_);
    return loader_->next();
  }
  void restart() {
    epoch_ = 0;
    loader_->set_epoch(0);
  }
  const data::TokenDataset& dataset() const { return ds_; }

 private:
  data::TokenDataset ds_;
  std::unique_ptr<data::BatchSampler> sampler_;
  std::unique_ptr<data::Loader> loader_;
  int64_t epoch_ = 0;
};

struct Rmse {
  double model = NAN;     // of the model's predictions, in grade levels
  double baseline = NAN;  // of predicting the training mean for every text
};

// RMSE over this rank's validation batches, totalled over ranks (every rank runs the same number
// of forwards: stage 3 gathers collectively). The sampler's tail repeats a few samples so every
// rank gets the same batch count; they count twice.
Rmse validation_rmse(Engine& engine, ReadabilityRegressor& model, BatchStream& valid,
                     const Targets& t) {
  engine.eval();
  torch::NoGradGuard no_grad;
  valid.restart();
  double se = 0, se_base = 0, n = 0;
  while (auto b = valid.next(/*wrap=*/false)) {
    engine.forward([&] {
      torch::Tensor y = grades(*b, t);
      torch::Tensor pred = model->forward(b->input_ids, b->attention_mask) * t.stddev + t.mean;
      se += (pred - y).pow(2).sum().item<double>();
      se_base += (y - t.mean).pow(2).sum().item<double>();
      n += static_cast<double>(y.numel());
      return torch::Tensor();
    });
  }
  engine.train();
  std::vector<double> total = sum_over_ranks(engine.communicator(), {se, se_base, n});
  ZT_CHECK(total[2] > 0, "validation shard ", valid.dataset().path(), " gave no samples");
  return {std::sqrt(total[0] / total[2]), std::sqrt(total[1] / total[2])};
}

struct Args {
  std::string train_shard, valid_shard, out_dir, batching, label_field;
  int64_t steps = 0;
};

int train(int argc, char** argv) {
  CliOptions cli("train_classifier",
                 "Fine-tunes the GPT trunk to regress the readability grade of texts with ZeRO.");
  Args a;
  cli.add()("train-shard", po::value(&a.train_shard), "training shard (.ztt); default data.path")(
      "valid-shard", po::value(&a.valid_shard), "validation shard (.ztt); none = no RMSE")(
      "steps", po::value(&a.steps)->default_value(100), "optimizer steps")(
      "batching", po::value(&a.batching), "smart | random | fixed (default: data.bucketing)")(
      "label-field", po::value(&a.label_field)->default_value("grade_centi"),
      "shard label holding the target in hundredths")(
      "out-dir", po::value(&a.out_dir)->default_value("train_classifier_out"),
      "metrics.jsonl and summary.json go here");
  if (!cli.parse(argc, argv)) return 0;
  const auto t_start = Clock::now();
  dist::Env env = dist::Env::discover();
  ProgramValues pv;
  pv.total_steps = a.steps;
  Config config = cli.load_config(env.world_size, pv);
  ZT_CHECK(config.model.has_value(), cli.config_path(), ": train_classifier needs a `model` block");
  if (a.train_shard.empty()) a.train_shard = config.data.path;
  ZT_CHECK(!a.train_shard.empty(), "train_classifier: no --train-shard and no data.path");
  const Batching mode = parse_batching(a.batching, config.data.bucketing);
  auto comm = dist::create_communicator(comm_options_from_config(config), env);
  torch::manual_seed(static_cast<uint64_t>(config.seed));

  // vocab_size 0 in the config: the shard's tokenizer vocabulary.
  const int64_t shard_vocab = data::TokenDataset(a.train_shard).vocab_size();
  const GptShape shape = gpt_shape_from_config(*config.model, shard_vocab);
  const int64_t max_len = std::min(config.data.max_length, shape.max_seq_len);
  BatchStream train_stream(a.train_shard, config, max_len, mode, *comm, /*training=*/true);
  const Targets targets = targets_of(train_stream.dataset(), a.label_field);
  std::optional<BatchStream> valid_data;
  if (!a.valid_shard.empty()) {
    valid_data.emplace(a.valid_shard, config, max_len, Batching::kSmart, *comm, false);
  }
  ReadabilityRegressor model(shape);
  ZT_LOG_INFO("regressor: ", shape.n_layer, " layers, d_model ", shape.d_model, ", vocab ",
              shape.vocab_size, ", ", model->num_parameters(), " parameters; target grade mean ",
              targets.mean, ", std ", targets.stddev, "; batching ", to_string(mode));
  const std::vector<std::string> frozen = freeze_parameters(*model, config.freeze);
  Engine engine(model.ptr(), engine_options_from_config(config, model->unit_names()), comm);
  std::optional<ParameterSnapshot> initial;
  if (!frozen.empty()) initial.emplace(engine);
  std::filesystem::create_directories(a.out_dir);
  MetricsLog metrics(comm->rank() == 0 ? a.out_dir + "/metrics.jsonl" : "");

  Rmse before, after;
  if (valid_data) {
    before = validation_rmse(engine, model, *valid_data, targets);
    ZT_LOG_INFO("validation RMSE before training: ", before.model, " grades (predicting the ",
                "training mean: ", before.baseline, ")");
  }

  const int accumulation = static_cast<int>(config.gradient_accumulation_steps);
  const auto t_train = Clock::now();
  double total_tokens = 0, total_padded = 0, total_samples = 0;
  for (int64_t step = 1; step <= a.steps; ++step) {
    const auto t0 = Clock::now();
    double loss_sum = 0, tokens = 0, padded = 0, samples = 0;
    for (int m = 0; m < accumulation; ++m) {
      data::Batch b = *train_stream.next(/*wrap=*/true);
      torch::Tensor target = (grades(b, targets) - targets.mean) / targets.stddev;
      torch::Tensor loss = engine.forward(
          [&] { return torch::mse_loss(model->forward(b.input_ids, b.attention_mask), target); });
      engine.backward(loss);
      engine.step();
      loss_sum += loss.item<double>();
      tokens += static_cast<double>(b.num_tokens);
      padded += static_cast<double>(b.num_padded_tokens);
      samples += static_cast<double>(b.batch_size());
    }
    std::vector<double> g = sum_over_ranks(*comm, {loss_sum, tokens, padded, samples});
    const double dt = seconds_since(t0);
    const double loss = g[0] / (accumulation * comm->size());
    total_tokens += g[1];
    total_padded += g[2];
    total_samples += g[3];
    const MemoryReport mem = engine.memory();
    metrics.write({{"step", double(step)},
                   {"loss", loss},
                   {"lr", engine.get_lr()},
                   {"tokens_per_s", g[1] / dt},
                   {"samples_per_s", g[3] / dt},
                   {"tokens", g[1]},
                   {"padded_tokens", g[2]},
                   {"padding_fraction", 1.0 - g[1] / g[2]},
                   {"loss_scale", engine.loss_scale()},
                   {"grad_norm", engine.last_grad_norm()},
                   {"model_state_bytes_per_rank", double(mem.model_state_bytes())},
                   {"step_seconds", dt}});
    if (step % config.steps_per_print == 0 || step == 1 || step == a.steps) {
      ZT_LOG_INFO("step ", step, "/", a.steps, " | loss ", loss, " (RMSE ~",
                  std::sqrt(loss) * targets.stddev, " grades) | ", std::lround(g[1] / dt),
                  " tok/s | padding ", std::lround(100 * (1.0 - g[1] / g[2])), "% | lr ",
                  engine.get_lr(), " | loss scale ", engine.loss_scale(), " | model states ",
                  mem.model_state_bytes() / 1024, " KiB/rank");
    }
  }
  const double train_seconds = seconds_since(t_train);
  if (valid_data) {
    after = validation_rmse(engine, model, *valid_data, targets);
    ZT_LOG_INFO("validation RMSE after training: ", after.model, " grades (before: ", before.model,
                ", predicting the training mean: ", after.baseline, ")");
  }
  ParameterChanges changes;
  if (initial) {
    changes = initial->compare(engine);
    ZT_CHECK(changes.frozen_moved.empty(), "frozen parameters changed in training");
  }
  const MemoryReport mem = engine.memory();
  MetricsLog summary(comm->rank() == 0 ? a.out_dir + "/summary.json" : "");
  summary.write({{"steps", double(a.steps)},
                 {"world_size", double(comm->size())},
                 {"smart_batching", mode == Batching::kSmart ? 1.0 : 0.0},
                 {"fixed_padding", mode == Batching::kFixed ? 1.0 : 0.0},
                 {"parameters", double(model->num_parameters())},
                 {"train_seconds", train_seconds},
                 {"total_seconds", seconds_since(t_start)},
                 {"tokens_per_s", total_tokens / train_seconds},
                 {"samples_per_s", total_samples / train_seconds},
                 {"padding_fraction", 1.0 - total_tokens / total_padded},
                 {"target_mean", targets.mean},
                 {"target_std", targets.stddev},
                 {"valid_rmse_before", before.model},
                 {"valid_rmse_after", after.model},
                 {"valid_rmse_mean_predictor", after.baseline},
                 {"model_state_bytes_per_rank", double(mem.model_state_bytes())},
                 {"frozen_parameters", double(changes.frozen)},
                 {"frozen_unchanged", double(changes.frozen_unchanged)},
                 {"trainable_parameters", double(changes.trainable)},
                 {"trainable_changed", double(changes.trainable_changed)}});
  ZT_LOG_INFO("trained ", a.steps, " steps (", to_string(mode), " batching) in ", train_seconds,
              " s: ", std::lround(total_tokens / train_seconds), " tok/s, ",
              std::lround(total_samples / train_seconds), " samples/s, padding ",
              100 * (1.0 - total_tokens / total_padded), "%; metrics in ", a.out_dir);
  comm->barrier()->wait();
  return 0;
}

}  // namespace
}  // namespace zt::examples

int main(int argc, char** argv) {
  return zt::run_main("train_classifier", [&] { return zt::examples::train(argc, argv); });
}
