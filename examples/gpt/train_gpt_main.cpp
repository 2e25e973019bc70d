// train_gpt: trains the GPT example (gpt_model.h) on a token shard with zt::Engine.
//
//   ztrun --standalone --nproc-per-node 2 build/bin/train_gpt
//       --config configs/gpt_small_zero3.yaml --train-shard corpora/kjv_train.ztt
//       --valid-shard corpora/kjv_valid.ztt --out-dir out
//
// Every rank reads the same shard and takes its own batches (LengthBucketedSampler); rank 0
// prints the progress line and writes <out-dir>/metrics.jsonl (one object per optimizer step)
// and <out-dir>/summary.json. Validation perplexity is measured before and after training.

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <sys/resource.h>

#include <torch/torch.h>

#include "core/base/logging.h"
#include "core/base/main_guard.h"
#include "core/checkpoint/checkpoint.h"
#include "core/config/cli_options.h"
#include "core/engine.h"
#include "core/config/engine_config.h"
#include "data/batch_sampler.h"
#include "data/collator.h"
#include "data/loader.h"
#include "data/token_dataset.h"
#include "data/tokenizer.h"
#include "examples/common/cpu_memory_meter.h"
#include "examples/common/freeze_parameters.h"
#include "examples/common/metrics_log.h"
#include "examples/common/parameter_snapshot.h"
#include "examples/common/rank_sum.h"
#include "examples/gpt/gpt_model.h"
#include "examples/gpt/text_generation.h"
#include "parallel/dist.h"

namespace po = boost::program_options;

namespace zt::examples {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

int64_t peak_rss_bytes() {
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

struct Args {
  std::string train_shard, valid_shard, tokenizer, out_dir, sample_prompt, checkpoint_dir;
  int64_t steps = 0, eval_batches = 0, sample_tokens = 0, top_k = 1;
  bool measure_memory = false;
};

// Batch pipeline of one shard for this rank: sampler -> collator -> loader, epochs chained.
class BatchStream {
 public:
  BatchStream(const std::string& path, const Config& c, const GptShape& shape,
              const dist::Communicator& comm, bool training)
      : ds_(path) {
    const DataConfig& d = c.data;
    const int64_t max_len = std::min(d.max_length, shape.max_seq_len);
    data::SamplerOptions so;
    so.max_tokens = d.max_tokens;
    so.batch_size = d.max_tokens > 0 ? 0 : c.train_micro_batch_size_per_gpu;
    so.mega_batch_mult = d.mega_batch_mult;
    so.seed = static_cast<uint64_t>(d.seed.value_or(c.seed)) + (training ? 0 : 1);
    so.tail = d.drop_last && training ? data::TailPolicy::kDrop : data::TailPolicy::kPadByRepeat;
    so.rank = comm.rank();
    so.world_size = comm.size();
    so.max_length = max_len + 1;  // the shift turns max_len + 1 tokens into max_len inputs
    so.pad_to_multiple = d.pad_to_multiple;
    if (d.bucketing || !training) {
      sampler_ = std::make_unique<data::LengthBucketedSampler>(ds_.lengths(), so);
    } else {
      sampler_ = std::make_unique<data::RandomBatchSampler>(ds_.lengths(), so);
    }
    data::CollatorOptions co;
    co.pad_id = 0;
    co.pad_to_multiple = d.pad_to_multiple;
    co.max_length = max_len;
    co.causal_lm_shift = true;
    loader_ = std::make_unique<data::Loader>(ds_, *sampler_, data::Collator(co),
                                             data::LoaderOptions{.num_workers = 1});
    loader_->set_epoch(0);
  }
  // Next batch; a new epoch starts when this one is exhausted (training), or nullopt (eval).
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
  int64_t num_batches() const { return loader_->num_batches(); }
  std::string sampler_state() const { return loader_->state().to_string(); }
  const data::TokenDataset& dataset() const { return ds_; }

 private:
  data::TokenDataset ds_;
  std::unique_ptr<data::BatchSampler> sampler_;
  std::unique_ptr<data::Loader> loader_;
  int64_t epoch_ = 0;
};

// Validation loss over (up to max_batches of) this rank's batches, summed over ranks: every
// rank runs the same number of forwards, as stage 3 gathers collectively.
double validation_loss(Engine& engine, Gpt& model, BatchStream& valid, int64_t max_batches) {
  engine.eval();
  torch::NoGradGuard no_grad;
  valid.restart();
  double sum = 0, count = 0;
  for (int64_t i = 0; max_batches <= 0 || i < max_batches; ++i) {
    auto b = valid.next(/*wrap=*/false);
    if (!b) break;
    engine.forward([&] {
      auto [s, n] = GptImpl::loss_sum(model->forward(b->input_ids, b->attention_mask), b->labels);
      sum += s;
      count += static_cast<double>(n);
      return torch::Tensor();
    });
  }
  engine.train();
  std::vector<double> total = sum_over_ranks(engine.communicator(), {sum, count});
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
  std::vector<int> prompt = tok.encode(a.sample_prompt);
  std::vector<int64_t> ids(prompt.begin(), prompt.end());
  GenerationOptions g;
  g.max_new_tokens = a.sample_tokens;
  g.top_k = a.top_k;
  g.temperature = 0.8;
  g.seed = 1234;
  g.eos_id = tok.eos_id();
  std::vector<int64_t> out;
  {
    // Every rank gathers (a collective) and samples the same text; rank 0 prints it.
    Engine::GatheredParameters full(engine);
    engine.eval();
    out = generate(*model, ids, g);
    engine.train();
  }
  std::vector<int> text_ids(out.begin(), out.end());
  ZT_LOG_INFO("sample (top_k ", a.top_k, "): ", tok.decode(text_ids));
}

int train(int argc, char** argv) {
  CliOptions cli("train_gpt", "Trains the GPT example on a token shard with ZeRO.");
  Args a;
  cli.add()("train-shard", po::value(&a.train_shard), "training shard (.ztt); default data.path")(
      "valid-shard", po::value(&a.valid_shard), "validation shard (.ztt); none = no perplexity")(
      "tokenizer", po::value(&a.tokenizer),
      "SentencePiece model for the sample; default: shard meta")(
      "steps", po::value(&a.steps)->default_value(100), "optimizer steps")(
      "eval-batches", po::value(&a.eval_batches)->default_value(0),
      "validation batches per rank (0 = the whole shard)")(
      "out-dir", po::value(&a.out_dir)->default_value("train_gpt_out"),
      "metrics.jsonl and summary.json go here")(
      "sample-prompt", po::value(&a.sample_prompt)->default_value("And God said"),
      "prompt of the text sample printed at the end")(
      "sample-tokens", po::value(&a.sample_tokens)->default_value(32), "0 = no sample")(
      "top-k", po::value(&a.top_k)->default_value(1), "sampling: 1 = greedy")(
      "checkpoint-dir", po::value(&a.checkpoint_dir),
      "save a checkpoint here at the end (core/checkpoint/checkpoint.h); none = no checkpoint")(
      "measure-memory", po::bool_switch(&a.measure_memory),
      "count CPU tensor bytes (cpu_memory_meter.h): per step, the peak allocated above what was "
      "live before it (activations, gathered parameters, transient gradients)");
  if (!cli.parse(argc, argv)) return 0;
  const auto t_start = Clock::now();
  if (a.measure_memory) CpuMemoryMeter::install();
  dist::Env env = dist::Env::discover();
  ProgramValues pv;
  pv.total_steps = a.steps;
  Config config = cli.load_config(env.world_size, pv);
  ZT_CHECK(config.model.has_value(), cli.config_path(), ": train_gpt needs a `model` block");
  if (a.train_shard.empty()) a.train_shard = config.data.path;
  ZT_CHECK(!a.train_shard.empty(), "train_gpt: no --train-shard and no data.path in the config");
  auto comm = dist::create_communicator(comm_options_from_config(config), env);
  torch::manual_seed(static_cast<uint64_t>(config.seed));

  // The model's vocabulary must cover the shard's ids: read it before building the model.
  const int64_t shard_vocab = data::TokenDataset(a.train_shard).vocab_size();
  GptShape shape = gpt_shape_from_config(*config.model, shard_vocab);
  Gpt model(shape);
  ZT_LOG_INFO("gpt: ", shape.n_layer, " layers, ", shape.n_head, " heads, d_model ", shape.d_model,
              ", vocab ", shape.vocab_size, ", ", model->num_parameters(), " parameters");
  // `freeze` globs (e.g. ["wte.*", "wpe.*"]): those parameters never train (the tied head
  // with wte). The engine keeps parameters without requires_grad out of every buffer.
  const std::vector<std::string> frozen = freeze_parameters(*model, config.freeze);
  if (!frozen.empty()) ZT_LOG_INFO("frozen (config `freeze`): ", join(frozen));
  Engine engine(model.ptr(), engine_options_from_config(config, model->unit_names()), comm);
  // With a freeze list: a copy of every parameter, to show after training that the frozen ones
  // are bit-identical and the others moved.
  std::optional<ParameterSnapshot> initial;
  if (!frozen.empty()) initial.emplace(engine);

  BatchStream train_data(a.train_shard, config, shape, *comm, /*training=*/true);
  std::optional<BatchStream> valid_data;
  if (!a.valid_shard.empty()) valid_data.emplace(a.valid_shard, config, shape, *comm, false);
  std::filesystem::create_directories(a.out_dir);
  MetricsLog metrics(comm->rank() == 0 ? a.out_dir + "/metrics.jsonl" : "");

  double val_before = NAN, val_after = NAN;
  if (valid_data) {
    val_before = validation_loss(engine, model, *valid_data, a.eval_batches);
    ZT_LOG_INFO("validation before training: loss ", val_before, ", perplexity ",
                std::exp(val_before));
  }

  const int accumulation = static_cast<int>(config.gradient_accumulation_steps);
  const auto t_train = Clock::now();
  double total_tokens = 0;
  int64_t max_step_extra_bytes = 0;
  for (int64_t step = 1; step <= a.steps; ++step) {
    const auto t0 = Clock::now();
    const int64_t live_before = CpuMemoryMeter::live_bytes();
    CpuMemoryMeter::reset_peak();
    double loss_sum = 0, tokens = 0, padded = 0;
    for (int m = 0; m < accumulation; ++m) {
      data::Batch b = *train_data.next(/*wrap=*/true);
      torch::Tensor loss = engine.forward(
          [&] { return GptImpl::loss(model->forward(b.input_ids, b.attention_mask), b.labels); });
      engine.backward(loss);
      engine.step();
      loss_sum += loss.item<double>();
      tokens += static_cast<double>(b.num_tokens);
      padded += static_cast<double>(b.num_padded_tokens);
    }
    const int64_t step_extra = CpuMemoryMeter::peak_bytes() - live_before;
    max_step_extra_bytes = std::max(max_step_extra_bytes, step_extra);
    std::vector<double> g = sum_over_ranks(*comm, {loss_sum, tokens, padded});
    const double dt = seconds_since(t0);
    const double loss = g[0] / (accumulation * comm->size());
    total_tokens += g[1];
    const MemoryReport mem = engine.memory();
    metrics.write({{"step", double(step)},
                   {"loss", loss},
                   {"lr", engine.get_lr()},
                   {"tokens_per_s", g[1] / dt},
                   {"tokens", g[1]},
                   {"padding_fraction", 1.0 - g[1] / g[2]},
                   {"loss_scale", engine.loss_scale()},
                   {"grad_norm", engine.last_grad_norm()},
                   {"model_state_bytes_per_rank", double(mem.model_state_bytes())},
                   {"step_seconds", dt},
                   {"step_peak_extra_bytes", a.measure_memory ? double(step_extra) : NAN}});
    if (step % config.steps_per_print == 0 || step == 1 || step == a.steps) {
      ZT_LOG_INFO("step ", step, "/", a.steps, " | loss ", loss, " | ", std::lround(g[1] / dt),
                  " tok/s | lr ", engine.get_lr(), " | loss scale ", engine.loss_scale(),
                  " | model states ", mem.model_state_bytes() / 1024, " KiB/rank (peak gathered ",
                  mem.peak_gathered_param_bytes / 1024, " KiB)");
    }
  }
  const double train_seconds = seconds_since(t_train);

  if (valid_data) {
    val_after = validation_loss(engine, model, *valid_data, a.eval_batches);
    ZT_LOG_INFO("validation after training: loss ", val_after, ", perplexity ", std::exp(val_after),
                " (before: ", std::exp(val_before), ")");
  }
  if (a.sample_tokens > 0) print_sample(engine, model, a, train_data.dataset());

  if (!a.checkpoint_dir.empty()) {
    const std::string tag = config.checkpoint.tag_prefix + std::to_string(engine.global_step());
    CheckpointOptions co;
    co.keep_last = config.checkpoint.keep_last;
    co.config_json = config.to_json(/*pretty=*/false);
    save_checkpoint(engine, a.checkpoint_dir, tag, {{"sampler", train_data.sampler_state()}}, co);
    ZT_LOG_INFO("checkpoint ", a.checkpoint_dir, "/", tag);
  }
  std::vector<double> rss = sum_over_ranks(*comm, {double(peak_rss_bytes())});
  ParameterChanges changes;
  if (initial) {
    changes = initial->compare(engine);
    ZT_LOG_INFO("after training: ", changes.frozen_unchanged, "/", changes.frozen,
                " frozen parameters bit-identical, ", changes.trainable_changed, "/",
                changes.trainable, " trainable parameters changed");
    ZT_CHECK(changes.frozen_moved.empty(),
             "frozen parameters changed in training: ", join(changes.frozen_moved));
  }
  const MemoryReport mem = engine.memory();
  MetricsLog summary(comm->rank() == 0 ? a.out_dir + "/summary.json" : "");
  summary.write(
      {{"steps", double(a.steps)},
       {"world_size", double(comm->size())},
       {"parameters", double(model->num_parameters())},
       {"train_seconds", train_seconds},
       {"total_seconds", seconds_since(t_start)},
       {"tokens_per_s", total_tokens / train_seconds},
       {"valid_loss_before", val_before},
       {"valid_ppl_before", std::exp(val_before)},
       {"valid_loss_after", val_after},
       {"valid_ppl_after", std::exp(val_after)},
       {"model_state_bytes_per_rank", double(mem.model_state_bytes())},
       {"peak_gathered_param_bytes", double(mem.peak_gathered_param_bytes)},
       {"mean_peak_rss_bytes", rss[0] / comm->size()},
       {"max_step_peak_extra_bytes", a.measure_memory ? double(max_step_extra_bytes) : NAN},
       {"frozen_parameters", double(changes.frozen)},
       {"frozen_unchanged", double(changes.frozen_unchanged)},
       {"trainable_parameters", double(changes.trainable)},
       {"trainable_changed", double(changes.trainable_changed)}});
  ZT_LOG_INFO("trained ", a.steps, " steps in ", train_seconds, " s, ",
              std::lround(total_tokens / train_seconds), " tok/s; mean peak RSS ",
              std::lround(rss[0] / comm->size() / 1048576), " MiB/rank; metrics in ", a.out_dir);
  comm->barrier()->wait();
  return 0;
}

}  // namespace
}  // namespace zt::examples

int main(int argc, char** argv) {
  return zt::run_main("train_gpt", [&] { return zt::examples::train(argc, argv); });
}
