// bench/sequence_parallel: training steps of a small LLaMA (models/llama) on one long sequence
// per data-parallel rank, at ZeRO stage 3 in fp32 with every layer's activations checkpointed,
// under mpirun. With --sp 1 each rank holds a whole sequence (data parallel); with --sp 2 the two
// ranks of a group split one sequence (Ulysses, parallel/sequence_exchange.h):
//
//   mpirun -np 2 build/bin/zt_bench_sequence --seq 8192 --sp 2 [--tile 1024] [--steps 3]
//       [--json FILE]
//
// --tile N computes the head and loss N positions at a time (the model's loss_tile_tokens,
// models/tiled_loss.h) instead of the whole logits at once.
//
// Prints (and writes to --json) the peak resident memory of the larger rank (VmHWM) and tokens/s
// over the steps after the first (tokens: every position of every rank's data, once).
// bench/sequence_parallel/run_sequence.py searches the longest --seq under a memory budget.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include <torch/torch.h>

#include "base/error.h"
#include "base/main_guard.h"
#include "bench/common/bench_stats.h"
#include "core/engine.h"
#include "data/sequence_split.h"
#include "models/causal_lm_loss.h"
#include "models/llama/llama_model.h"
#include "parallel/dist.h"
#include "parallel/topology.h"
#include "train/token_loss.h"

namespace {

struct Args {
  int64_t seq = 4096;
  int sp = 1;
  int steps = 3;
  int64_t tile = 0;  // the model's loss_tile_tokens: 0 = whole logits
  std::string json;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    ZT_CHECK(i + 1 < argc, "zt_bench_sequence: ", k, " needs a value");
    const std::string v = argv[++i];
    if (k == "--seq") {
      a.seq = std::stoll(v);
    } else if (k == "--sp") {
      a.sp = std::stoi(v);
    } else if (k == "--tile") {
      a.tile = std::stoll(v);
    } else if (k == "--steps") {
      a.steps = std::stoi(v);
    } else if (k == "--json") {
      a.json = v;
    } else {
      ZT_CHECK(false, "zt_bench_sequence: unknown option ", k,
               " (--seq, --sp, --tile, --steps, --json)");
    }
  }
  ZT_CHECK(a.steps >= 2, "zt_bench_sequence: --steps must be >= 2 (the first is a warm-up)");
  return a;
}

zt::models::LlamaShape shape(int64_t seq, int64_t tile) {
  zt::models::LlamaShape s;
  s.vocab_size = 2048;
  s.hidden_size = 256;
  s.intermediate_size = 688;
  s.num_hidden_layers = 4;
  s.num_attention_heads = 8;
  s.num_key_value_heads = 2;
  s.head_dim = 32;
  s.max_position_embeddings = seq;
  s.activation_checkpointing = true;
  s.loss_tile_tokens = tile;
  return s;
}

int run(int argc, char** argv) {
  const Args a = parse(argc, argv);
  auto comm = zt::dist::create_communicator({});
  torch::manual_seed(1);
  zt::models::LlamaForCausalLM model(shape(a.seq, a.tile));
  zt::EngineOptions o;
  o.stage = 3;
  o.sequence_parallel_size = a.sp;
  o.gradient_clipping = 1.0;
  o.optimizer.type = zt::optim::OptimizerKind::kAdamW;
  o.hyper.lr = 1e-4;
  o.units = model->unit_names();
  o.reduce_bucket_size = 256 * 256;
  o.stage3_prefetch_bucket_size = 256 * 256;
  zt::Engine engine(model.ptr(), o, comm);
  const zt::dist::Topology& topology = engine.topology();
  model->set_sequence_parallel(topology.sequence);
  const int dp = topology.data_parallel_size();
  std::vector<double> seconds;
  for (int s = 0; s < a.steps; ++s) {
    torch::manual_seed(100 + s * dp + topology.data_parallel_rank());
    zt::data::Batch b;
    torch::Tensor ids = torch::randint(1, 2048, {1, a.seq + 1}, torch::kLong);
    b.input_ids = ids.narrow(1, 0, a.seq);
    b.labels = ids.narrow(1, 1, a.seq);
    b = zt::data::sequence_part(b, comm->rank() % a.sp, a.sp, 0);
    const auto start = std::chrono::steady_clock::now();
    const double scale =
        zt::train::token_loss_scale(zt::models::causal_lm_tokens(b.labels), topology, 1);
    torch::Tensor loss =
        engine.forward([&] { return model->loss_total(b.input_ids, {}, b.labels) * scale; });
    engine.backward(loss);
    engine.step();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  seconds.erase(seconds.begin());
  double total = 0;
  for (double x : seconds) total += x;
  torch::Tensor peak =
      torch::full({1}, static_cast<double>(zt::bench::read_status_kib("VmHWM:")), torch::kDouble);
  comm->all_reduce(peak, zt::dist::ReduceOp::kMax)->wait();
  const double tokens_per_s = static_cast<double>(dp * a.seq) * seconds.size() / total;
  const double peak_mib = peak.item<double>() / 1024.0;
  if (comm->rank() == 0) {
    std::printf("seq %lld sp %d dp %d tile %lld: peak RSS %.0f MiB (larger rank), %.0f tokens/s\n",
                static_cast<long long>(a.seq), a.sp, dp, static_cast<long long>(a.tile), peak_mib,
                tokens_per_s);
    if (!a.json.empty()) {
      std::ofstream(a.json) << "{\"seq\": " << a.seq << ", \"sp\": " << a.sp << ", \"dp\": " << dp
                            << ", \"tile\": " << a.tile << ", \"peak_rss_mib\": " << peak_mib
                            << ", \"tokens_per_s\": " << tokens_per_s << "}\n";
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_main("zt_bench_sequence", [&] { return run(argc, argv); });
}
