// bench/sequence_parallel: training steps of a LLaMA (models/llama) on one long sequence per
// data-parallel rank, in fp32 with every layer's activations checkpointed, under mpirun. With
// --sp 1 each rank holds a whole sequence (data parallel); with --sp 2 the two ranks of a group
// split one sequence (Ulysses, parallel/sequence_exchange.h); with --tp 2 they split every
// layer's projections (parallel/tensor_parallel.h) and read the same sequence:
//
//   mpirun -np 2 build/bin/zt_bench_sequence --seq 8192 --sp 2 [--tp 1] [--tile 1024]
//       [--mlp-tile 1024] [--stage 3] [--wide 0] [--steps 3] [--json FILE]
//
// --tile N computes the head and loss N positions at a time (the model's loss_tile_tokens,
// models/tiled_loss.h) instead of the whole logits at once; --mlp-tile N each layer's MLP N
// positions at a time (its mlp_tile_tokens, models/tiled_mlp.h). --wide 1 trains a model 4x as wide
// (hidden 1024, 16 heads), where the layers' weights dominate.
//
// Prints (and writes to --json) the peak resident memory of the larger rank (VmHWM), its model
// states (Engine::memory: parameters, gradients, optimizer state) and largest gathered unit, and
// tokens/s over the steps after the first (tokens: every position of every data-parallel rank's
// sequence, once).
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
  int sp = 1, tp = 1, stage = 3;
  bool wide = false;
  int steps = 3;
  int64_t tile = 0;      // the model's loss_tile_tokens: 0 = whole logits
  int64_t mlp_tile = 0;  // the model's mlp_tile_tokens: 0 = whole MLP
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
    } else if (k == "--tp") {
      a.tp = std::stoi(v);
    } else if (k == "--stage") {
      a.stage = std::stoi(v);
    } else if (k == "--wide") {
      a.wide = std::stoi(v) != 0;
    } else if (k == "--mlp-tile") {
      a.mlp_tile = std::stoll(v);
    } else if (k == "--tile") {
      a.tile = std::stoll(v);
    } else if (k == "--steps") {
      a.steps = std::stoi(v);
    } else if (k == "--json") {
      a.json = v;
    } else {
      ZT_CHECK(false, "zt_bench_sequence: unknown option ", k,
               " (--seq, --sp, --tp, --tile, --mlp-tile, --stage, --wide, --steps, --json)");
    }
  }
  ZT_CHECK(a.steps >= 2, "zt_bench_sequence: --steps must be >= 2 (the first is a warm-up)");
  return a;
}

zt::models::LlamaShape shape(int64_t seq, int64_t tile, int64_t mlp_tile, bool wide) {
  zt::models::LlamaShape s;
  s.vocab_size = 2048;
  s.hidden_size = wide ? 1024 : 256;
  s.intermediate_size = wide ? 2816 : 688;
  s.num_hidden_layers = 4;
  s.num_attention_heads = wide ? 16 : 8;
  s.num_key_value_heads = wide ? 8 : 2;
  s.head_dim = 64;
  if (!wide) s.head_dim = 32;
  s.max_position_embeddings = seq;
  s.activation_checkpointing = true;
  s.loss_tile_tokens = tile;
  s.mlp_tile_tokens = mlp_tile;
  return s;
}

int run(int argc, char** argv) {
  const Args a = parse(argc, argv);
  auto comm = zt::dist::create_communicator({});
  torch::manual_seed(1);
  zt::models::LlamaForCausalLM model(shape(a.seq, a.tile, a.mlp_tile, a.wide));
  zt::dist::TopologyOptions to;
  to.sequence_parallel_size = a.sp;
  to.tensor_parallel_size = a.tp;
  auto topo = zt::dist::make_topology(comm, to, zt::dist::Env::discover());
  model->set_tensor_parallel(topo->tensor);
  zt::EngineOptions o;
  o.stage = a.stage;
  o.sequence_parallel_size = a.sp;
  o.tensor_parallel_size = a.tp;
  o.tensor_split_params = model->tensor_split_parameters();
  o.gradient_clipping = 1.0;
  o.optimizer.type = zt::optim::OptimizerKind::kAdamW;
  o.hyper.lr = 1e-4;
  o.units = model->unit_names();
  o.reduce_bucket_size = 256 * 256;
  o.stage3_prefetch_bucket_size = 256 * 256;
  zt::Engine engine(model.ptr(), o, comm, nullptr, topo);
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
    b = zt::data::sequence_part(b, topology.sequence ? topology.sequence->rank() : 0, a.sp, 0);
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
  const zt::MemoryReport m = engine.memory();
  const double states_mib = static_cast<double>(m.model_state_bytes()) / (1 << 20);
  const double gathered_mib = static_cast<double>(m.peak_gathered_param_bytes) / (1 << 20);
  if (comm->rank() == 0) {
    std::printf(
        "seq %lld sp %d tp %d dp %d stage %d tile %lld: peak RSS %.0f MiB (larger rank), model "
        "states %.1f MiB, largest gathered %.1f MiB, %.0f tokens/s\n",
        static_cast<long long>(a.seq), a.sp, a.tp, dp, a.stage, static_cast<long long>(a.tile),
        peak_mib, states_mib, gathered_mib, tokens_per_s);
    if (!a.json.empty()) {
      std::ofstream(a.json) << "{\"seq\": " << a.seq << ", \"sp\": " << a.sp << ", \"tp\": " << a.tp
                            << ", \"dp\": " << dp << ", \"stage\": " << a.stage
                            << ", \"tile\": " << a.tile << ", \"mlp_tile\": " << a.mlp_tile
                            << ", \"peak_rss_mib\": " << peak_mib
                            << ", \"model_state_mib\": " << states_mib
                            << ", \"peak_gathered_mib\": " << gathered_mib
                            << ", \"tokens_per_s\": " << tokens_per_s << "}\n";
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_main("zt_bench_sequence", [&] { return run(argc, argv); });
}
