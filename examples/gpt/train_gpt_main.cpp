// train_gpt: trains the GPT example (gpt_model.h) on a token shard with zt::initialize.
//
//   ztrun --standalone --nproc-per-node 2 build/bin/train_gpt
//       --config configs/gpt_small_zero3.yaml --train-shard corpora/kjv_train.ztt
//       --valid-shard corpora/kjv_valid.ztt --out-dir out
//
// Every rank reads the same shard and takes its own batches (zt::BatchStream); rank 0 prints the
// progress line and writes <out-dir>/metrics.jsonl (one object per optimizer step) and
// <out-dir>/summary.json. Validation perplexity is measured before and after training.

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

#include <torch/torch.h>

#include "base/logging.h"
#include "base/main_guard.h"
#include "data/tokenizer.h"
#include "examples/gpt/gpt_plan.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/gpt_model.h"
#include "models/gpt/pretrained.h"
#include "models/gpt/text_generation.h"
#include "train/initialize.h"
#include "train/load_by_name.h"
#include "train/measured_memory.h"
#include "train/memory_check.h"
#include "train/memory_peaks.h"
#include "train/rank_sum.h"
#include "train/training_run.h"

namespace po = boost::program_options;

namespace zt::examples {

using namespace zt::models;

// The training run's pieces (train/): TrainingRun and its bookkeeping.
using namespace zt::train;

namespace {

struct Args : RunArgs {
  std::string tokenizer, sample_prompt, init_from, init_tag;
  int64_t eval_batches = 0, sample_tokens = 0, top_k = 1, eval_interval = 0;
  double temperature = 0.8;
  bool measure_memory = false;
};

void add_options(CliOptions& cli, Args& a) {
  add_run_options(cli, a, "train_gpt_out");
  cli.add()("tokenizer", po::value(&a.tokenizer),
            "SentencePiece model for the sample; default: shard meta")(
      "eval-batches", po::value(&a.eval_batches)->default_value(0),
      "validation batches per rank (0 = the whole shard)")(
      "eval-interval", po::value(&a.eval_interval)->default_value(0),
      "validation loss every N steps into metrics.jsonl's valid_loss (0 = before and after only)")(
      "sample-prompt", po::value(&a.sample_prompt)->default_value("And God said"),
      "prompt of the text sample printed at the end; several separated by '|'")(
      "sample-tokens", po::value(&a.sample_tokens)->default_value(32), "0 = no sample")(
      "top-k", po::value(&a.top_k)->default_value(1), "sampling: 1 = greedy")(
      "temperature", po::value(&a.temperature)->default_value(0.8), "sampling temperature")(
      "init-from", po::value(&a.init_from),
      "start from pretrained weights: a Hugging Face GPT-2 directory (config.json) or a "
      "checkpoint directory of this example, any stage and world size (pretrained.h)")(
      "init-tag", po::value(&a.init_tag), "checkpoint tag for --init-from (default: latest)")(
      "measure-memory", po::bool_switch(&a.measure_memory),
      "count CPU tensor bytes (cpu_memory_meter.h): per step, the peak allocated above what was "
      "live before it (activations, gathered parameters, transient gradients)");
}

// Mean validation loss per token over (up to --eval-batches of) the validation shard.
double validation_loss(TrainingRun& run, BatchStream& valid, Gpt& model, int64_t max_batches) {
  std::vector<double> total =
      run.evaluate(valid, max_batches, 2, [&](const data::Batch& b, double* sums) {
        auto [s, n] = GptImpl::loss_sum(model->forward(b.input_ids, b.attention_mask), b.labels);
        sums[0] += s;
        sums[1] += static_cast<double>(n);
      });
  ZT_CHECK(total[1] > 0, "validation shard ", valid.dataset().path(), " gave no tokens");
  return total[0] / total[1];
}

void print_sample(Engine& engine, Gpt& model, const Args& a, const data::TokenDataset& ds) {
  std::string path = a.tokenizer.empty() ? ds.meta_value("tokenizer") : a.tokenizer;
  if (path.empty() || !std::filesystem::exists(path)) {
    ZT_LOG_WARN("no tokenizer model (", path.empty() ? "none in shard meta" : path,
                "); skipping the text sample");
    return;
  }
  data::Tokenizer tok = data::Tokenizer::load(path);
  GenerationOptions g;
  g.max_new_tokens = a.sample_tokens;
  g.top_k = a.top_k;
  g.temperature = a.temperature;
  g.seed = 1234;
  g.eos_id = tok.eos_id();
  // Every rank gathers (a collective) and samples the same texts; rank 0 prints them.
  Engine::GatheredParameters full(engine);
  engine.eval();
  std::string rest = a.sample_prompt;
  for (size_t bar; !rest.empty(); rest = bar == std::string::npos ? "" : rest.substr(bar + 1)) {
    bar = rest.find('|');
    std::vector<int> prompt = tok.encode(rest.substr(0, bar));
    if (prompt.empty()) continue;
    std::vector<int64_t> out =
        generate(*model, std::vector<int64_t>(prompt.begin(), prompt.end()), g);
    ZT_LOG_INFO("sample (top_k ", a.top_k, ", temperature ", a.temperature,
                "): ", tok.decode(std::vector<int>(out.begin(), out.end())));
  }
  engine.train();
}

// Validation loss over the validation shard (NaN without one), logged; `before` is the loss
// before training (NaN when this is that pass).
double validate(TrainingRun& run, BatchStream* valid, Gpt& model, int64_t max_batches,
                double before) {
  if (valid == nullptr) return NAN;
  const double loss = validation_loss(run, *valid, model, max_batches);
  if (std::isnan(before)) {
    ZT_LOG_INFO("validation before training: loss ", loss, ", perplexity ", std::exp(loss));
  } else {
    ZT_LOG_INFO("validation after training: loss ", loss, ", perplexity ", std::exp(loss),
                " (before: ", std::exp(before), ")");
  }
  return loss;
}

// After training: validation, the text sample, the freeze check, summary.json.
void finish(Training& t, TrainingRun& run, Gpt& model, BatchStream* valid, double val_before,
            const Args& a, double max_step_extra, const plan::MemoryPlan& planned) {
  const double val_after = validate(run, valid, model, a.eval_batches, val_before);
  if (a.sample_tokens > 0) print_sample(*t.engine, model, a, t.loader->dataset());
  std::vector<double> rss = sum_over_ranks(*t.comm, {double(memory_peaks(t.device).rss)});
  const Fields peaks = largest_peaks(t);
  run.check_frozen();
  Fields summary = {
      {"valid_loss_before", val_before},
      {"valid_ppl_before", std::exp(val_before)},
      {"valid_loss_after", val_after},
      {"valid_ppl_after", std::exp(val_after)},
      {"peak_gathered_param_bytes", double(t.engine->memory().peak_gathered_param_bytes)},
      {"mean_peak_rss_bytes", rss[0] / t.comm->size()},
      {"max_step_peak_extra_bytes", max_step_extra}};
  summary.insert(summary.end(), peaks.begin(), peaks.end());
  const Fields plan = plan_fields(planned);
  summary.insert(summary.end(), plan.begin(), plan.end());
  run.write_summary(summary);
  ZT_LOG_INFO("trained ", a.steps, " steps in ", run.train_seconds(), " s; mean peak RSS ",
              std::lround(rss[0] / t.comm->size() / 1048576), " MiB/rank; metrics in ", a.out_dir);
}

// The progress line after "step s/N | loss L".
std::string progress(const Engine& e, const StepTotals& s) {
  const MemoryReport mem = e.memory();
  return detail::str(" | ", std::lround(s.tokens / s.seconds), " tok/s | lr ", e.get_lr(),
                     " | loss scale ", e.loss_scale(), " | model states ",
                     mem.model_state_bytes() / 1024, " KiB/rank (peak gathered ",
                     mem.peak_gathered_param_bytes / 1024, " KiB)");
}

void log_model(const GptImpl& model) {
  const GptShape& s = model.shape();
  ZT_LOG_INFO("gpt: ", s.n_layer, " layers, ", s.n_head, " heads, d_model ", s.d_model, ", vocab ",
              s.vocab_size, ", ", model.num_parameters(), " parameters");
}

// The model, with --init-from's weights when given. At stage 3 (`partitioned` set) it is built
// partitioned, and a Hugging Face directory is read straight into this rank's shards
// (pretrained.h: load_pretrained_shards); a checkpoint directory is consolidated, so the model is
// built whole to take it (train/load_by_name.h: every parameter found, with its shape) and
// zt::initialize shards it. Every parameter must be found, with its shape, either way.
Gpt build_model(const GptShape& shape, zero::PartitionedInit* partitioned, const Args& a) {
  if (a.init_from.empty() || (partitioned && streams_into_shards(a.init_from))) {
    Gpt model(shape, partitioned);
    log_model(*model);
    if (!a.init_from.empty()) {
      // Every rank loads its shards; the logging macro evaluates its arguments on rank 0 only.
      const std::string loaded = load_pretrained_shards(a.init_from, shape, *partitioned);
      ZT_LOG_INFO(loaded);
    }
    return model;
  }
  if (partitioned) {
    ZT_LOG_INFO("init from ", a.init_from, ": a zerotorch checkpoint loads into the whole ",
                "model, so it is built whole on every rank (only a Hugging Face directory loads ",
                "into shards)");
  }
  Gpt model(shape, nullptr);
  log_model(*model);
  PretrainedGpt p = read_pretrained_gpt(a.init_from, a.init_tag);
  check_same_architecture(model->shape(), p);
  LoadReport r = load_by_name(*model, p.values, {});
  ZT_LOG_INFO("init from ", p.source, ": ", r.summary());
  return model;
}

// The memory plan of this run (examples/gpt/gpt_plan.h), logged; a run that cannot fit is
// refused here, before the model is built (train/memory_check.h).
plan::MemoryPlan plan_run(const Launch& launch, const GptShape& shape) {
  GptPlanner planner(shape, launch.device);
  const int world = launch.comm->size();
  const std::string backend = launch.comm->backend();
  return plan_and_check(launch.config, launch.device, launch.env, planner.checkpointing(),
                        [&](const Config& c, bool checkpointing) {
                          return planner(c, world, backend, checkpointing);
                        });
}

int train(int argc, char** argv) {
  CliOptions cli("train_gpt", "Trains the GPT example on a token shard with ZeRO.");
  Args a;
  add_options(cli, a);
  if (!cli.parse(argc, argv)) return 0;
  StepPeak peak(a.measure_memory);
  Launch launch = zt::launch(cli, gpt_program_values(a.steps));
  auto shard = std::make_shared<const data::TokenDataset>(train_shard_of(a, launch.config));
  // The model's vocabulary must cover the shard's ids. At stage 3 it is built partitioned (no
  // rank holds it whole), unless a checkpoint's weights are loaded into the whole model first.
  const GptShape shape =
      gpt_shape_from_config(launch.config.program_block("model"), shard->vocab_size());
  const plan::MemoryPlan planned = plan_run(launch, shape);
  Gpt model = build_model(shape, launch.partitioned.get(), a);
  const BatchStreamOptions batches{.max_length = model->shape().max_seq_len,
                                   .causal_lm_shift = true};
  Training t = initialize(
      std::move(launch), model.ptr(),
      {.units = model->unit_names(), .memory_planned = true, .train_data = shard, .data = batches});
  std::unique_ptr<BatchStream> valid = validation_stream(t, a.valid_shard, batches);
  TrainingRun run(t, a);
  const double val_before = validate(run, valid.get(), model, a.eval_batches, NAN);
  for (int64_t step = run.first_step(); step <= a.steps; ++step) {
    peak.begin();
    run.begin_step();
    for (int m = 0; m < t.config.gradient_accumulation_steps; ++m) {
      data::Batch b = *t.loader->next();
      torch::Tensor loss = t.engine->forward(
          [&] { return model->causal_lm_loss(b.input_ids, b.attention_mask, b.labels); });
      t.engine->backward(loss);
      t.engine->step();
      run.add(loss, &b);
    }
    Fields extra = peak.end();
    // Periodic validation (every rank runs it: stage 3 gathers collectively); null otherwise.
    const bool eval_now =
        valid && a.eval_interval > 0 && (step % a.eval_interval == 0 || step == a.steps);
    extra.push_back(
        {"valid_loss", eval_now ? validation_loss(run, *valid, model, a.eval_batches) : NAN});
    run.end_step(step, extra, [&](const StepTotals& s) { return progress(*t.engine, s); });
  }
  finish(t, run, model, valid.get(), val_before, a, peak.max(), planned);
  t.comm->barrier()->wait();
  return 0;
}

}  // namespace
}  // namespace zt::examples

int main(int argc, char** argv) {
  return zt::run_main("train_gpt", [&] { return zt::examples::train(argc, argv); });
}
