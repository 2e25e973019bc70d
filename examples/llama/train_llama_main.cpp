// train_llama: trains a LLaMA-family decoder (Llama, Qwen2, Mistral, and the mixtures of experts
// Mixtral, Qwen2-MoE and Qwen3-MoE: llama_model.h) on a token shard with zt::initialize, from
// scratch (the config's `model` block, llama_config.h) or from a Hugging Face directory
// (--init-from, hf_llama.h):
//
//   ztrun --standalone --nproc-per-node 2 build/bin/train_llama
//       --config configs/llama_zero3.yaml --init-from SmolLM-135M/
//       --train-shard train.ztt --valid-shard valid.ztt --out-dir out --checkpoint-dir out/ckpt
//
// At stage 3 the model is built partitioned and the Hugging Face weights go straight from the
// mapped files into each rank's shards; otherwise it is built whole and loaded by name. The
// checkpoint directory gets the model's config.json, so zt-export-hf turns any checkpoint
// (any stage, any world size) back into a directory transformers loads. Rank 0 writes
// <out-dir>/metrics.jsonl and <out-dir>/summary.json (validation loss before and after).

#include <cmath>
#include <filesystem>
#include <fstream>

#include <torch/torch.h>

#include "base/logging.h"
#include "base/main_guard.h"
#include "core/activations/activation_checkpoint.h"
#include "examples/llama/llama_plan.h"
#include "models/causal_lm_loss.h"
#include "models/llama/hf_llama.h"
#include "models/llama/llama_config.h"
#include "parallel/tensor_parallel.h"
#include "train/initialize.h"
#include "train/measured_memory.h"
#include "train/memory_check.h"
#include "train/token_loss.h"
#include "train/training_run.h"

namespace po = boost::program_options;

namespace zt::examples {

using namespace zt::models;

using namespace zt::train;

namespace {

namespace fs = std::filesystem;

struct Args : RunArgs {
  std::string init_from;
  int64_t eval_batches = 0;
  bool measure_memory = false;
};

using Model = LlamaForCausalLM;

double validation_loss(TrainingRun& run, BatchStream& valid, Model& model, int64_t max_batches) {
  std::vector<double> total =
      run.evaluate(valid, max_batches, 2, [&](const data::Batch& b, double* sums) {
        auto [s, n] =
            LlamaForCausalLMImpl::loss_sum(model->forward(b.input_ids, b.attention_mask), b.labels);
        sums[0] += s;
        sums[1] += static_cast<double>(n);
      });
  ZT_CHECK(total[1] > 0, "validation shard ", valid.dataset().path(), " gave no tokens");
  return total[0] / total[1];
}

double validate(TrainingRun& run, BatchStream* valid, Model& model, int64_t max_batches,
                const char* when) {
  if (valid == nullptr) return NAN;
  const double loss = validation_loss(run, *valid, model, max_batches);
  ZT_LOG_INFO("validation ", when, " training: loss ", loss, ", perplexity ", std::exp(loss));
  return loss;
}

// The shape: a Hugging Face directory's config.json (the block may only add training switches)
// or the `model` block.
LlamaShape shape_of(const Args& a, const Config& config, int64_t shard_vocab) {
  const ProgramBlock block = config.program_block("model");
  if (a.init_from.empty()) return llama_shape_from_config(block, shard_vocab);
  ZT_CHECK(
      is_hf_directory(a.init_from), "--init-from ", a.init_from,
      " is not a Hugging Face model directory (config.json + safetensors or pytorch_model.bin)");
  const std::string cfg = (fs::path(a.init_from) / "config.json").string();
  LlamaShape s = llama_shape_over_pretrained(block, llama_shape_from_hf_config(cfg), cfg);
  ZT_CHECK(s.vocab_size >= shard_vocab, a.init_from, " has vocab_size ", s.vocab_size,
           ", the shard's tokenizer has ", shard_vocab, " ids");
  return s;
}

Model build_model(const LlamaShape& shape, zero::PartitionedInit* partitioned, const Args& a) {
  Model model(shape, partitioned);
  ZT_LOG_INFO(shape.model_type, ": ", shape.num_hidden_layers, " layers, ",
              shape.num_attention_heads, " heads (", shape.num_key_value_heads,
              " key/value), hidden ", shape.hidden_size, ", vocab ", shape.vocab_size,
              shape.tie_word_embeddings ? ", tied head" : "", ", ", model->num_parameters(),
              " parameters", partitioned ? ", built partitioned (this rank keeps its shards)" : "");
  if (!a.init_from.empty()) {
    // Every rank loads (its shards); the logging macro evaluates its arguments on rank 0 only.
    const std::string loaded = partitioned ? load_hf_llama_shards(a.init_from, shape, *partitioned)
                                           : load_hf_llama(a.init_from, *model);
    ZT_LOG_INFO(loaded);
  }
  return model;
}

// The memory plan of this run (llama_plan.h) for the part of the model this rank holds, logged;
// a run that cannot fit is refused here, before the model is built (train/memory_check.h).
plan::MemoryPlan plan_run(const Launch& launch, const LlamaShape& shape) {
  if (!launch.config.memory_plan.enabled) return {};
  const dist::Topology& topology = *launch.topology;
  LlamaRankSplit ranks;
  if (topology.sequence) {
    ranks.sequence = topology.sequence->size();
    ranks.sequence_rank = topology.sequence->rank();
    ranks.wire = sequence_parallel_setup(launch).wire;
  }
  if (topology.tensor) {
    ranks.tensor = topology.tensor->size();
    ranks.tensor_rank = topology.tensor->rank();
  }
  if (topology.expert) {
    ranks.expert = topology.expert->size();
    ranks.expert_rank = topology.expert->rank();
  }
  LlamaPlanner planner(shape, ranks, launch.device);
  const int world = launch.comm->size();
  const std::string backend = launch.comm->backend();
  return plan_and_check(launch.config, launch.device, launch.env, planner.checkpointing(),
                        [&](const Config& c, bool checkpointing) {
                          return planner(c, world, backend, checkpointing);
                        });
}

// The checkpoint directory gets the model's config.json (rank 0), which export reads.
void write_config(const Training& t, const Args& a, const LlamaShape& shape) {
  const std::string dir =
      a.checkpoint_dir.empty() ? t.config.checkpoint.save_dir : a.checkpoint_dir;
  if (dir.empty() || t.comm->rank() != 0) return;
  fs::create_directories(dir);
  std::ofstream out(fs::path(dir) / "config.json");
  out << hf_llama_config_json(shape);
  ZT_CHECK(out.good(), "cannot write ", dir, "/config.json");
}

int train(int argc, char** argv) {
  CliOptions cli("train_llama", "Trains a LLaMA-family decoder on a token shard with ZeRO.");
  Args a;
  add_run_options(cli, a, "train_llama_out");
  cli.add()("init-from", po::value(&a.init_from),
            "start from a Hugging Face Llama, Qwen2, Mistral, Mixtral, Qwen2-MoE or Qwen3-MoE "
            "directory (config.json + safetensors)")(
      "eval-batches", po::value(&a.eval_batches)->default_value(0),
      "validation batches per rank (0 = the whole shard)")(
      "measure-memory", po::bool_switch(&a.measure_memory),
      "count CPU tensor bytes and write the memory peaks and the plan's to summary.json");
  if (!cli.parse(argc, argv)) return 0;
  StepPeak peak(a.measure_memory);
  ProgramValues program;
  program.total_steps = a.steps;
  if (!a.init_from.empty() && is_hf_directory(a.init_from)) {
    program.hidden_size =
        llama_shape_from_hf_config((fs::path(a.init_from) / "config.json").string()).hidden_size;
  } else {
    program.hidden_size_key = "model.hidden_size";
  }
  Launch launch = zt::launch(cli, program);
  auto shard = std::make_shared<const data::TokenDataset>(train_shard_of(a, launch.config));
  const LlamaShape shape = shape_of(a, launch.config, shard->vocab_size());
  const plan::MemoryPlan planned = plan_run(launch, shape);
  Model model = build_model(shape, launch.partitioned.get(), a);
  model->set_tensor_parallel(launch.topology->tensor);
  model->set_expert_parallel(launch.topology->expert);
  const SequenceParallelSetup sp = sequence_parallel_setup(launch);
  model->set_sequence_parallel(sp.group, sp.wire);
  model->set_data_parallel(launch.topology->batch, launch.topology->data_parallel_size());
  const BatchStreamOptions batches{.max_length = shape.max_position_embeddings,
                                   .causal_lm_shift = true};
  Training t = initialize(std::move(launch), model.ptr(),
                          {.units = model->unit_names(),
                           .memory_planned = true,
                           .train_data = shard,
                           .data = batches,
                           .sequence_parallel = true,
                           .tensor_parallel = true,
                           .expert_parallel = true,
                           .tensor_split = model->tensor_split_parameters()});
  write_config(t, a, shape);
  std::unique_ptr<BatchStream> valid = validation_stream(t, a.valid_shard, batches);
  TrainingRun run(t, a);
  const double before = validate(run, valid.get(), model, a.eval_batches, "before");
  int64_t checkpointed = 0;  // layer calls checkpointed in the last training forward
  for (int64_t step = run.first_step(); step <= a.steps; ++step) {
    peak.begin();
    run.begin_step();
    // The step's mean token loss (train/token_loss.h): every micro-batch's tokens are counted
    // before the first forward.
    const int accumulation = static_cast<int>(t.config.gradient_accumulation_steps);
    std::vector<data::Batch> micro;
    int64_t tokens = 0;
    for (int m = 0; m < accumulation; ++m) {
      micro.push_back(*t.loader->next());
      tokens += causal_lm_tokens(micro.back().labels);
      if (step == run.first_step() && t.engine->topology().tensor) {
        dist::check_same_on_group(micro.back().input_ids, *t.engine->topology().tensor,
                                  "input ids");
        dist::check_same_on_group(micro.back().labels, *t.engine->topology().tensor, "labels");
      }
    }
    const double scale = token_loss_scale(tokens, t.engine->topology(), accumulation);
    for (const data::Batch& b : micro) {
      torch::Tensor loss = t.engine->forward([&] {
        torch::Tensor l = model->loss_total(b.input_ids, b.attention_mask, b.labels) * scale;
        // A mixture's load-balancing term (output_router_logits), scaled for the engine's average.
        const torch::Tensor aux = model->router_aux_loss();
        return aux.defined() ? l + aux : l;
      });
      checkpointed = checkpoint_counts().checkpointed;
      t.engine->backward(loss);
      t.engine->step();
      run.add(loss, &b);
    }
    run.end_step(step, peak.end(), [&](const StepTotals& s) {
      return detail::str(" | ", std::lround(s.tokens / s.seconds), " tok/s | lr ",
                         t.engine->get_lr());
    });
  }
  const double after = validate(run, valid.get(), model, a.eval_batches, "after");
  run.check_frozen();
  Fields summary = {{"valid_loss_before", before},
                    {"valid_loss_after", after},
                    {"checkpointed_calls_per_forward", double(checkpointed)}};
  if (a.measure_memory) {
    const Fields peaks = largest_peaks(t), plan = plan_fields(planned);
    summary.insert(summary.end(), peaks.begin(), peaks.end());
    summary.insert(summary.end(), plan.begin(), plan.end());
  }
  run.write_summary(summary);
  ZT_LOG_INFO("trained ", a.steps, " steps in ", run.train_seconds(), " s; metrics in ", a.out_dir);
  t.comm->barrier()->wait();
  return 0;
}

}  // namespace
}  // namespace zt::examples

int main(int argc, char** argv) {
  return zt::run_main("train_llama", [&] { return zt::examples::train(argc, argv); });
}
