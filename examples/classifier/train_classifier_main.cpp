// train_classifier: fine-tunes the GPT trunk (as an encoder, readability_regressor.h) to predict
// the Flesch-Kincaid grade of a text (readability.h), CommonLit-style regression on
// variable-length text, with zt::initialize.
//
//   ztrun --standalone --nproc-per-node 2 build/bin/train_classifier
//       --config configs/classifier_zero2.yaml --train-shard fk_train.ztt
//       --valid-shard fk_valid.ztt --batching smart --out-dir out/smart
//
// --init-from DIR starts the trunk from pretrained weights: the GPT example's checkpoint (any
// stage and world size) or a Hugging Face GPT-2 directory, loaded by name into trunk.*; the head
// is new. The report names what was loaded, what is new and what was skipped; a missing name or a
// shape mismatch stops the run with one line, unless --init-skip lists it (globs over the
// pretrained names, e.g. wpe.weight for another max_seq_len).
//
// --batching (default: data.bucketing):
//   smart   LengthBucketedSampler + dynamic padding (each batch padded to its longest sample)
//   random  RandomBatchSampler + dynamic padding
//   fixed   RandomBatchSampler, every batch padded to data.max_length
// Rank 0 prints a progress line and writes <out-dir>/metrics.jsonl (one object per optimizer
// step) and <out-dir>/summary.json (time, tokens/s, padding fraction, validation RMSE in grade
// levels before and after training, and of always predicting the training mean).

#include <algorithm>
#include <cmath>
#include <memory>

#include <torch/torch.h>

#include "base/logging.h"
#include "base/main_guard.h"
#include "examples/classifier/readability_regressor.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/gpt_model.h"
#include "models/gpt/pretrained.h"
#include "train/initialize.h"
#include "train/load_by_name.h"
#include "train/swa_weights.h"
#include "train/training_run.h"

namespace po = boost::program_options;

namespace zt::examples {

using namespace zt::models;

// The training run's pieces (train/): TrainingRun and its bookkeeping.
using namespace zt::train;

namespace {

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

// The batches of a mode, over the data block: smart = length-bucketed, random = shuffled, fixed
// = shuffled and every batch padded to max_len (rounding its length up to a multiple of max_len).
BatchStreamOptions batches_of(Batching mode, int64_t max_len) {
  BatchStreamOptions o;
  o.max_length = max_len;
  o.bucketing = mode == Batching::kSmart;
  if (mode == Batching::kFixed) o.pad_to_multiple = max_len;
  return o;
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

struct Rmse {
  double model = NAN;     // of the model's predictions, in grade levels
  double baseline = NAN;  // of predicting the training mean for every text
};

// RMSE over the validation batches, totalled over ranks. The sampler's tail repeats a few
// samples so every rank gets the same batch count; those rows do not count.
Rmse validation_rmse(TrainingRun& run, BatchStream& valid, ReadabilityRegressor& model,
                     const Targets& t) {
  std::vector<double> total = run.evaluate(valid, 0, 3, [&](const data::Batch& b, double* sums) {
    torch::Tensor y = b.without_repeats(grades(b, t));
    torch::Tensor pred =
        b.without_repeats(model->forward(b.input_ids, b.attention_mask)) * t.stddev + t.mean;
    sums[0] += (pred - y).pow(2).sum().item<double>();
    sums[1] += (y - t.mean).pow(2).sum().item<double>();
    sums[2] += static_cast<double>(y.numel());
  });
  ZT_CHECK(total[2] > 0, "validation shard ", valid.dataset().path(), " gave no samples");
  return {std::sqrt(total[0] / total[2]), std::sqrt(total[1] / total[2])};
}

struct Args : RunArgs {
  std::string batching, label_field, init_from, init_tag;
  std::vector<std::string> init_skip;
};

// The trunk from pretrained GPT weights (before zt::initialize shards the model).
void init_trunk(ReadabilityRegressorImpl& model, const GptShape& shape, const Args& a) {
  PretrainedGpt p = read_pretrained_gpt(a.init_from, a.init_tag);
  check_same_architecture(shape, p);
  LoadByNameOptions o;
  o.prefix = "trunk.";
  o.expected_new = {"head.*"};
  o.expected_skipped = a.init_skip;
  for (const auto& s : a.init_skip) o.expected_new.push_back("trunk." + s);
  LoadReport r = load_by_name(model, p.values, o);
  ZT_LOG_INFO("trunk from ", p.source, ": ", r.summary());
}

int train(int argc, char** argv) {
  CliOptions cli("train_classifier",
                 "Fine-tunes the GPT trunk to regress the readability grade of texts with ZeRO.");
  Args a;
  add_run_options(cli, a, "train_classifier_out");
  cli.add()("batching", po::value(&a.batching), "smart | random | fixed (default: data.bucketing)")(
      "label-field", po::value(&a.label_field)->default_value("grade_centi"),
      "shard label holding the target in hundredths")(
      "init-from", po::value(&a.init_from),
      "pretrained trunk: a checkpoint directory of train_gpt or a Hugging Face GPT-2 directory")(
      "init-tag", po::value(&a.init_tag), "checkpoint tag for --init-from (default: latest)")(
      "init-skip", po::value(&a.init_skip)->multitoken(),
      "pretrained names (globs) expected not to load; their parameters keep their init");
  if (!cli.parse(argc, argv)) return 0;
  Launch launch = zt::launch(cli, gpt_program_values(a.steps));
  const Batching mode = parse_batching(a.batching, launch.config.data.bucketing);
  auto shard = std::make_shared<const data::TokenDataset>(train_shard_of(a, launch.config));
  // vocab_size 0 in the config: the shard's tokenizer vocabulary.
  const GptShape shape =
      gpt_shape_from_config(launch.config.program_block("model"), shard->vocab_size());
  const Targets targets = targets_of(*shard, a.label_field);
  ReadabilityRegressor model(shape);
  if (!a.init_from.empty()) init_trunk(*model, shape, a);
  ZT_LOG_INFO("regressor: ", shape.n_layer, " layers, d_model ", shape.d_model, ", vocab ",
              shape.vocab_size, ", ", model->num_parameters(), " parameters; target grade mean ",
              targets.mean, ", std ", targets.stddev, "; batching ", to_string(mode));
  const int64_t max_len = std::min(launch.config.data.max_length, shape.max_seq_len);
  Training t = initialize(
      std::move(launch), model.ptr(),
      {.units = model->unit_names(), .train_data = shard, .data = batches_of(mode, max_len)});
  std::unique_ptr<BatchStream> valid =
      validation_stream(t, a.valid_shard, batches_of(Batching::kSmart, max_len));
  TrainingRun run(t, a);
  Rmse before, after;
  if (valid) {
    before = validation_rmse(run, *valid, model, targets);
    ZT_LOG_INFO("validation RMSE before training: ", before.model, " grades (predicting the ",
                "training mean: ", before.baseline, ")");
  }
  for (int64_t step = run.first_step(); step <= a.steps; ++step) {
    run.begin_step();
    for (int m = 0; m < t.config.gradient_accumulation_steps; ++m) {
      data::Batch b = *t.loader->next();
      torch::Tensor target = (grades(b, targets) - targets.mean) / targets.stddev;
      torch::Tensor loss = t.engine->forward(
          [&] { return torch::mse_loss(model->forward(b.input_ids, b.attention_mask), target); });
      t.engine->backward(loss);
      t.engine->step();
      run.add(loss, &b);
    }
    run.end_step(step, {}, [&](const StepTotals& s) {
      return detail::str(" (RMSE ~", std::sqrt(s.loss) * targets.stddev, " grades) | ",
                         std::lround(s.tokens / s.seconds), " tok/s | padding ",
                         std::lround(100 * s.padding_fraction()), "% | lr ", t.engine->get_lr(),
                         " | loss scale ", t.engine->loss_scale(), " | model states ",
                         t.engine->memory().model_state_bytes() / 1024, " KiB/rank");
    });
  }
  if (valid) {
    after = validation_rmse(run, *valid, model, targets);
    ZT_LOG_INFO("validation RMSE after training: ", after.model, " grades (before: ", before.model,
                ", predicting the training mean: ", after.baseline, ")");
  }
  // With swa on: the validation RMSE of the averaged weights too (they replace the trained ones).
  double swa_rmse = NAN;
  if (valid && t.config.swa.enabled && load_swa_weights(*t.engine)) {
    swa_rmse = validation_rmse(run, *valid, model, targets).model;
    ZT_LOG_INFO("validation RMSE with the SWA average: ", swa_rmse,
                " grades (last weights: ", after.model, ")");
  }
  run.check_frozen();
  run.write_summary({{"valid_rmse_swa", swa_rmse},
                     {"smart_batching", mode == Batching::kSmart ? 1.0 : 0.0},
                     {"fixed_padding", mode == Batching::kFixed ? 1.0 : 0.0},
                     {"target_mean", targets.mean},
                     {"target_std", targets.stddev},
                     {"valid_rmse_before", before.model},
                     {"valid_rmse_after", after.model},
                     {"valid_rmse_mean_predictor", after.baseline}});
  ZT_LOG_INFO("trained ", a.steps, " steps (", to_string(mode), " batching) in ",
              run.train_seconds(), " s; metrics in ", a.out_dir);
  t.comm->barrier()->wait();
  return 0;
}

}  // namespace
}  // namespace zt::examples

int main(int argc, char** argv) {
  return zt::run_main("train_classifier", [&] { return zt::examples::train(argc, argv); });
}
