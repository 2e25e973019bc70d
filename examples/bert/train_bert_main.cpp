// train_bert: fine-tunes a Hugging Face BERT or RoBERTa sequence classifier (bert_model.h) on a
// labelled token shard with zt::initialize: the classifier example's recipe (smart batching of
// variable-length text, examples/classifier) on a pretrained encoder.
//
//   ztrun --standalone --nproc-per-node 2 build/bin/train_bert
//       --config configs/bert_classifier_zero3.yaml --init-from HF_DIR
//       --train-shard fk_train.ztt --valid-shard fk_valid.ztt --checkpoint-dir out/ckpt
//   zt-export-hf out/ckpt out/hf        # a directory transformers loads
//
// --init-from HF_DIR (required): config.json (model_type bert or roberta) and its safetensors, one
// file or a sharded index; at ZeRO stage 3 each rank reads only its shards' ranges from the mapped
// files (hf_bert.h). A directory without the task head (a pre-trained BertModel or *ForMaskedLM)
// gets a new one.
// Task, from config.json's num_labels: 1 = regression on the shard label --label-field,
// standardized over the training shard ((y - mean) / std, MSE); more = classification, the label
// being the class index (cross-entropy).
// The config's `model` block has one key, activation_checkpointing (default false): each encoder
// layer keeps only its input and runs again in backward (the activation_checkpointing block
// tunes it, core/activations/activation_checkpoint.h).
// Rank 0 writes <out-dir>/metrics.jsonl and summary.json (validation loss before and after, and
// for regression the RMSE in label units), and keeps config.json with the checkpoints
// (<checkpoint-dir>/hf_config.json) for zt-export-hf.

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>

#include <torch/torch.h>

#include "base/logging.h"
#include "base/main_guard.h"
#include "core/activations/activation_checkpoint.h"
#include "core/config/program_block.h"
#include "models/bert/bert_model.h"
#include "models/bert/hf_bert.h"
#include "train/initialize.h"
#include "train/training_run.h"

namespace po = boost::program_options;

namespace zt::examples {

using namespace zt::models;

using namespace zt::train;

namespace {

namespace fs = std::filesystem;

struct Args : RunArgs {
  std::string init_from, label_field;
};

// The task's targets: the label column, and for regression its standardization.
struct Task {
  int64_t field = 0;  // label column in the shard
  int64_t num_labels = 1;
  double mean = 0, stddev = 1;
  bool regression() const { return num_labels == 1; }
};

Task task_of(const data::TokenDataset& ds, const std::string& field, int64_t num_labels) {
  Task t;
  t.num_labels = num_labels;
  const auto& fields = ds.label_fields();
  auto it = std::find(fields.begin(), fields.end(), field);
  ZT_CHECK(it != fields.end(), "shard ", ds.path(), " has no label field '", field,
           "' (set --label-field)");
  t.field = it - fields.begin();
  double sum = 0, sum_sq = 0;
  for (int64_t i = 0; i < ds.size(); ++i) {
    const int64_t y = ds.labels(i)[t.field];
    ZT_CHECK(t.regression() || (y >= 0 && y < num_labels), "shard ", ds.path(), ": sample ", i,
             " has label ", y, ", not a class of the model's num_labels ", num_labels);
    sum += static_cast<double>(y);
    sum_sq += static_cast<double>(y) * static_cast<double>(y);
  }
  const double n = static_cast<double>(ds.size());
  t.mean = sum / n;
  t.stddev = std::sqrt(std::max(1e-12, sum_sq / n - t.mean * t.mean));
  return t;
}

// The batch's labels of the task's field.
torch::Tensor targets_of(const data::Batch& b, const Task& t) {
  return b.sample_labels.select(1, t.field);
}

// The loss (fp32) of logits against labels y: MSE on the standardized target, or cross-entropy
// on the class.
torch::Tensor loss_of(const torch::Tensor& logits, const torch::Tensor& y, const Task& t) {
  if (t.regression()) {
    torch::Tensor target = (y.to(torch::kFloat) - t.mean) / t.stddev;
    return torch::mse_loss(logits.squeeze(-1).to(torch::kFloat), target);
  }
  return torch::cross_entropy_loss(logits.to(torch::kFloat), y);
}

struct Validation {
  double loss = NAN;
  double rmse = NAN;  // regression: in label units
};

// Over the validation batches, totalled over ranks.
Validation validate(TrainingRun& run, BatchStream& valid, BertForSequenceClassification& model,
                    const Task& t) {
  std::vector<double> total = run.evaluate(valid, 0, 2, [&](const data::Batch& b, double* sums) {
    torch::Tensor logits = model->forward(b.input_ids, b.attention_mask);
    // Each sample once: the rows of the sampler's tail repeats do not count.
    torch::Tensor y = b.without_repeats(targets_of(b, t));
    const auto n = static_cast<double>(y.size(0));
    if (n > 0) sums[0] += loss_of(b.without_repeats(logits), y, t).item<double>() * n;
    sums[1] += n;
  });
  ZT_CHECK(total[1] > 0, "validation shard ", valid.dataset().path(), " gave no samples");
  Validation v;
  v.loss = total[0] / total[1];
  if (t.regression()) v.rmse = std::sqrt(v.loss) * t.stddev;
  return v;
}

bool activation_checkpointing_of(const ProgramBlock& model) {
  bool on = false;
  if (model.empty()) return on;
  ProgramBlockReader r(model);
  r.field("activation_checkpointing", on);
  r.finish();
  return on;
}

int train(int argc, char** argv) {
  CliOptions cli("train_bert",
                 "Fine-tunes a Hugging Face BERT or RoBERTa sequence classifier with ZeRO.");
  Args a;
  add_run_options(cli, a, "train_bert_out");
  cli.add()("init-from", po::value(&a.init_from),
            "Hugging Face model directory (config.json, model_type bert or roberta)")(
      "label-field", po::value(&a.label_field)->default_value("grade_centi"),
      "shard label: the regression target, or the class index");
  if (!cli.parse(argc, argv)) return 0;
  ZT_CHECK(!a.init_from.empty(), "train_bert: --init-from HF_DIR is required");
  BertConfig config = read_hf_bert_config(a.init_from);
  ProgramValues program;
  program.total_steps = a.steps;
  program.hidden_size = config.hidden_size;
  Launch launch = zt::launch(cli, program);
  config.activation_checkpointing =
      activation_checkpointing_of(launch.config.program_block("model"));
  auto shard = std::make_shared<const data::TokenDataset>(train_shard_of(a, launch.config));
  ZT_CHECK(shard->vocab_size() <= config.vocab_size, "shard ", shard->path(),
           " has token ids up to ", shard->vocab_size() - 1, ", beyond the vocabulary of ",
           a.init_from, " (vocab_size ", config.vocab_size, ")");
  const Task task = task_of(*shard, a.label_field, config.num_labels);
  // The exporter's config, next to the checkpoints.
  const std::string ckpt_dir =
      a.checkpoint_dir.empty() ? launch.config.checkpoint.save_dir : a.checkpoint_dir;
  if (!ckpt_dir.empty() && launch.env.rank == 0) {
    fs::create_directories(ckpt_dir);
    std::ofstream f(fs::path(ckpt_dir) / kCheckpointHfConfig);
    f << bert_config_json(config);
    ZT_CHECK(f.good(), "cannot write ", ckpt_dir, "/", kCheckpointHfConfig);
  }
  // At stage 3 the model is built partitioned and the files stream into the shards.
  BertForSequenceClassification model(config, launch.partitioned.get());
  // Every rank loads (its shards); the logging macro evaluates its arguments on rank 0 only.
  const std::string loaded = load_hf_bert(a.init_from, *model, launch.partitioned.get());
  ZT_LOG_INFO(loaded);
  ZT_LOG_INFO(config.model_type, ": ", config.num_hidden_layers, " layers, hidden ",
              config.hidden_size, ", vocab ", config.vocab_size, ", ", config.num_labels,
              " label(s) (", task.regression() ? "regression" : "classification",
              "), activation checkpointing ", config.activation_checkpointing ? "on" : "off");
  const int64_t max_len = std::min(launch.config.data.max_length, config.max_length());
  BatchStreamOptions batches{.max_length = max_len};
  Training t = initialize(std::move(launch), model.ptr(),
                          {.units = model->unit_names(), .train_data = shard, .data = batches});
  std::unique_ptr<BatchStream> valid = validation_stream(t, a.valid_shard, batches);
  TrainingRun run(t, a);
  Validation before, after;
  if (valid) before = validate(run, *valid, model, task);
  for (int64_t step = run.first_step(); step <= a.steps; ++step) {
    run.begin_step();
    for (int m = 0; m < t.config.gradient_accumulation_steps; ++m) {
      data::Batch b = *t.loader->next();
      torch::Tensor loss = t.engine->forward([&] {
        return loss_of(model->forward(b.input_ids, b.attention_mask), targets_of(b, task), task);
      });
      t.engine->backward(loss);
      t.engine->step();
      run.add(loss, &b);
    }
    run.end_step(step, {}, [&](const StepTotals& s) {
      return detail::str(" | ", std::lround(s.tokens / s.seconds), " tok/s | padding ",
                         std::lround(100 * s.padding_fraction()), "% | lr ", t.engine->get_lr());
    });
  }
  const CheckpointCounts counts = checkpoint_counts();
  ZT_LOG_INFO("activation checkpointing: ", counts.checkpointed, " of ", counts.calls,
              " layer calls of the last forward checkpointed");
  if (valid) {
    after = validate(run, *valid, model, task);
    ZT_LOG_INFO("validation loss ", before.loss, " -> ", after.loss,
                task.regression()
                    ? detail::str(" (RMSE ", before.rmse, " -> ", after.rmse, " label units)")
                    : std::string());
  }
  run.check_frozen();
  run.write_summary({{"valid_loss_before", before.loss},
                     {"valid_loss_after", after.loss},
                     {"valid_rmse_before", before.rmse},
                     {"valid_rmse_after", after.rmse},
                     {"target_mean", task.mean},
                     {"target_std", task.stddev},
                     {"checkpointed_layer_calls", static_cast<double>(counts.checkpointed)}});
  t.comm->barrier()->wait();
  return 0;
}

}  // namespace
}  // namespace zt::examples

int main(int argc, char** argv) {
  return zt::run_main("train_bert", [&] { return zt::examples::train(argc, argv); });
}
