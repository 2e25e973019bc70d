// bench/train_step: one training step of a ~20M-parameter GPT-style model under each ZeRO stage
// (and stage 2 with optimizer offload), in fp32, bf16 or fp16 (fp32 masters, dynamic loss
// scaling), on CPU, every rank of an mpirun job:
//
//   mpirun -np 2 build/bin/zt_bench_train_step [--steps 3] [--stages 0,1,2,3,2o]
//       [--dtypes fp32,bf16,fp16] [--flops off|on|both] [--json FILE]
//
// Rows run configuration by configuration, dtype by dtype inside each (so dtypes of one stage
// are neighbours in time). --flops on runs the engine with flops_profiler enabled (counting
// every step, no report); `both` trains two identical models side by side, one without and one
// with, step after step in turn, so that load changes hit both alike: the profiler's cost is the
// difference of their rows ("+flops"). `both` also times a ModuleScope (what every unit's call
// costs while no profiler counts, core/profile/flop_counter.h) in a loop.
// Per configuration: forward / backward / optimizer time (median over steps; "comm wait" is the
// time blocked in Work::wait(), i.e. communication not hidden behind computation), tokens/s over
// all ranks, the engine's accounted model-state bytes per rank next to docs/DESIGN.md's formula,
// and the peak RSS of rank 0 while that configuration ran (VmHWM, reset between configurations).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "base/error.h"
#include "base/main_guard.h"
#include "bench/common/bench_stats.h"
#include "core/engine.h"
#include "core/profile/flop_counter.h"
#include "core/zero/call_unit.h"
#include "parallel/dist.h"

namespace {

using zt::bench::read_status_kib;
using zt::bench::upper_median;

constexpr int64_t kVocab = 8000, kWidth = 384, kHeads = 6, kLayers = 10, kSeq = 128, kBatch = 4;

struct BlockImpl : torch::nn::Module {
  BlockImpl() {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})));
    qkv = register_module("qkv", torch::nn::Linear(kWidth, 3 * kWidth));
    proj = register_module("proj", torch::nn::Linear(kWidth, kWidth));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})));
    fc = register_module("fc", torch::nn::Linear(kWidth, 4 * kWidth));
    out = register_module("out", torch::nn::Linear(4 * kWidth, kWidth));
  }
  torch::Tensor forward(torch::Tensor x) {  // (B, T, C)
    const int64_t b = x.size(0), t = x.size(1), d = kWidth / kHeads;
    auto parts = qkv->forward(ln1->forward(x)).chunk(3, -1);
    auto heads = [&](const torch::Tensor& y) { return y.view({b, t, kHeads, d}).transpose(1, 2); };
    torch::Tensor y = at::scaled_dot_product_attention(heads(parts[0]), heads(parts[1]),
                                                       heads(parts[2]), {}, 0.0, /*causal=*/true);
    x = x + proj->forward(y.transpose(1, 2).reshape({b, t, kWidth}));
    return x + out->forward(torch::gelu(fc->forward(ln2->forward(x))));
  }
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, out{nullptr};
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  GptImpl() {
    wte = register_module("wte", torch::nn::Embedding(kVocab, kWidth));
    wpe = register_module("wpe", torch::nn::Embedding(kSeq, kWidth));
    auto list = register_module("blocks", torch::nn::ModuleList());  // names blocks.0, ...
    for (int64_t i = 0; i < kLayers; ++i) {
      blocks.push_back(Block());
      list->push_back(blocks.back());
    }
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})));
  }
  torch::Tensor loss(const torch::Tensor& ids, const torch::Tensor& targets) {
    torch::Tensor x = wte->forward(ids) + wpe->forward(torch::arange(ids.size(1)));
    for (auto& b : blocks) x = zt::call_unit(*b, x);
    torch::Tensor logits = torch::linear(ln_f->forward(x), wte->weight);  // tied head
    return torch::cross_entropy_loss(logits.view({-1, kVocab}).to(torch::kFloat),
                                     targets.view({-1}));
  }
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  std::vector<Block> blocks;
  torch::nn::LayerNorm ln_f{nullptr};
};
TORCH_MODULE(Gpt);

struct Setup {
  std::string name;
  int stage;
  bool offload;
};

struct Dtype {
  std::string name;
  torch::ScalarType type;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

void reset_peak_rss() {
  std::ofstream("/proc/self/clear_refs") << "5";
}

double formula_bytes(int stage, int64_t psi, int n, torch::ScalarType dtype) {
  // docs/DESIGN.md: params p (4 in fp32, 2 in 16-bit), gradients g = 4 (accumulated in fp32), a
  // master m (0 in fp32, where the params are the master; 4 otherwise), K = 8 (Adam's m, v).
  const double p = dtype == torch::kFloat ? 4 : 2, g = 4, m = dtype == torch::kFloat ? 0 : 4, k = 8;
  switch (stage) {
    case 0: return (p + g + m + k) * psi;
    case 1: return (p + g) * psi + (m + k) * psi / n;
    case 2: return p * psi + (g + m + k) * psi / n;
    default: return (p + g + m + k) * psi / n;
  }
}

int run(int argc, char** argv) {
  int steps = 3;
  std::string json, stages = "0,1,2,3,2o", dtypes = "fp32", flops = "off";
  const char* usage =
      "usage: zt_bench_train_step [--steps N] [--stages 0,1,2,3,2o] [--dtypes fp32,bf16,fp16] "
      "[--flops off|on|both] [--json F]";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (a == "--stages" && i + 1 < argc) {
      stages = argv[++i];
    } else if (a == "--dtypes" && i + 1 < argc) {
      dtypes = argv[++i];
    } else if (a == "--flops" && i + 1 < argc) {
      flops = argv[++i];
    } else if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else {
      ZT_THROW("unknown argument '", a, "' (", usage, ")");
    }
  }
  ZT_CHECK(steps >= 1, "--steps must be >= 1, got ", steps);
  ZT_CHECK(flops == "off" || flops == "on" || flops == "both", "--flops: unknown value '", flops,
           "' (off, on or both)");
  std::vector<bool> profiled;  // the variants trained side by side
  if (flops != "on") profiled.push_back(false);
  if (flops != "off") profiled.push_back(true);
  std::vector<Setup> setups;
  for (const std::string& st : split(stages)) {
    ZT_CHECK(st == "0" || st == "1" || st == "2" || st == "3" || st == "2o",
             "--stages: unknown entry '", st, "' (0, 1, 2, 3 or 2o = stage 2 + offload)");
    if (st == "2o") {
      setups.push_back({"stage 2 + offload", 2, true});
    } else {
      setups.push_back({"stage " + st, std::stoi(st), false});
    }
  }
  std::vector<Dtype> types;
  for (const std::string& d : split(dtypes)) {
    ZT_CHECK(d == "fp32" || d == "bf16" || d == "fp16", "--dtypes: unknown entry '", d,
             "' (fp32, bf16 or fp16)");
    types.push_back({d, d == "fp32"   ? torch::kFloat
                        : d == "bf16" ? torch::kBFloat16
                                      : torch::kHalf});
  }
  ZT_CHECK(!setups.empty() && !types.empty(), usage);
  zt::dist::CommOptions copt;
  auto comm = zt::dist::create_communicator(copt);
  const int rank = comm->rank(), world = comm->size();
  std::vector<std::string> rows;
  if (rank == 0) {
    std::printf(
        "zerotorch train_step: GPT d=%ld L=%ld vocab=%ld, %d ranks x %ld x %ld tokens, "
        "%s backend, %d timed steps (median)\n",
        static_cast<long>(kWidth), static_cast<long>(kLayers), static_cast<long>(kVocab), world,
        static_cast<long>(kBatch), static_cast<long>(kSeq), comm->backend().c_str(), steps);
    std::printf("%-24s %5s %8s %8s %9s %8s %8s %9s %12s %12s %10s %6s\n", "config", "dtype",
                "fwd ms", "bwd ms", "wait ms", "opt ms", "step ms", "tokens/s", "state B/rank",
                "formula B", "peakRSS MiB", "skips");
  }
  if (flops == "both" && rank == 0) {
    Gpt probe;
    constexpr int kCalls = 10'000'000;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) zt::profile::ModuleScope scope(*probe);
    const double ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    std::printf("ModuleScope with no profiler counting: %.2f ns per call (%d calls)\n", ns / kCalls,
                kCalls);
  }
  for (const Setup& s : setups)
    for (const Dtype& dt : types) {
      reset_peak_rss();
      struct Run {
        bool profiled;
        Gpt model;
        std::unique_ptr<zt::Engine> engine;
        std::vector<double> fwd, bwd, opt, wait, total;
      };
      std::vector<Run> runs;
      int64_t psi = 0;
      for (bool prof : profiled) {
        torch::manual_seed(0);
        Run r{prof, Gpt(), nullptr, {}, {}, {}, {}, {}};
        psi = 0;
        for (auto& p : r.model->parameters()) psi += p.numel();
        zt::EngineOptions o;
        zt::read_environment_switches(o);
        o.stage = s.stage;
        o.stage3_param_persistence_threshold = 0;  // stage 3 shards every buffer, as FSDP2
        o.offload_optimizer.device = s.offload ? zt::OffloadDevice::kCpu : zt::OffloadDevice::kNone;
        o.optimizer.type =
            s.offload ? zt::optim::OptimizerKind::kCpuAdam : zt::optim::OptimizerKind::kAdamW;
        o.hyper.lr = 1e-4;
        o.compute_dtype = dt.type;
        o.reduce_bucket_size = 5'000'000;
        o.stage3_prefetch_bucket_size = 5'000'000;
        o.flops_profiler.enabled = prof;
        o.flops_profiler.profile_step = -1;  // count every step, print no report
        for (int64_t i = 0; i < kLayers; ++i) o.units.push_back("blocks." + std::to_string(i));
        r.engine = std::make_unique<zt::Engine>(r.model.ptr(), o, comm);
        runs.push_back(std::move(r));
      }
      for (int step = 0; step < steps + 1; ++step) {  // step 0 warms up
        for (Run& r : runs) {
          torch::manual_seed(100 * step + rank);
          torch::Tensor ids = torch::randint(kVocab, {kBatch, kSeq});
          torch::Tensor targets = torch::randint(kVocab, {kBatch, kSeq});
          zt::Engine& engine = *r.engine;
          engine.reset_comm_wait();
          auto t0 = std::chrono::steady_clock::now();
          torch::Tensor loss = engine.forward([&] { return r.model->loss(ids, targets); });
          auto t1 = std::chrono::steady_clock::now();
          engine.backward(loss);
          auto t2 = std::chrono::steady_clock::now();
          engine.step();
          auto t3 = std::chrono::steady_clock::now();
          if (step == 0) continue;
          auto ms = [](auto a, auto b) {
            return std::chrono::duration<double, std::milli>(b - a).count();
          };
          r.fwd.push_back(ms(t0, t1));
          r.bwd.push_back(ms(t1, t2));
          r.opt.push_back(ms(t2, t3));
          r.total.push_back(ms(t0, t3));
          r.wait.push_back(engine.comm_wait_seconds() * 1e3);
        }
      }
      // Peak RSS covers every variant of this configuration together.
      const double rss_mib = read_status_kib("VmHWM:") / 1024.0;
      for (Run& r : runs) {
        const zt::Engine& engine = *r.engine;
        const std::string name = s.name + (r.profiled ? " +flops" : "");
        const zt::MemoryReport m = engine.memory();
        const double step_ms = upper_median(r.total);
        const double tokens_per_s = world * kBatch * kSeq / (step_ms / 1e3);
        const double formula = formula_bytes(s.stage, psi, world, dt.type);
        if (rank != 0) continue;
        std::printf("%-24s %5s %8.0f %8.0f %9.0f %8.0f %8.0f %9.0f %12ld %12.0f %10.0f %6ld\n",
                    name.c_str(), dt.name.c_str(), upper_median(r.fwd), upper_median(r.bwd),
                    upper_median(r.wait), upper_median(r.opt), step_ms, tokens_per_s,
                    static_cast<long>(m.model_state_bytes()), formula, rss_mib,
                    static_cast<long>(engine.skipped_steps()));
        char buf[700];
        std::snprintf(buf, sizeof buf,
                      "{\"config\":\"%s\",\"dtype\":\"%s\",\"stage\":%d,\"offload\":%s,"
                      "\"flops_profiler\":%s,\"ranks\":%d,\"params\":%ld,"
                      "\"forward_ms\":%.3f,\"backward_ms\":%.3f,\"comm_wait_ms\":%.3f,"
                      "\"optimizer_ms\":%.3f,\"step_ms\":%.3f,\"tokens_per_s\":%.1f,"
                      "\"model_state_bytes\":%ld,\"formula_bytes\":%.0f,\"peak_rss_bytes\":%.0f,"
                      "\"skipped_steps\":%ld}",
                      name.c_str(), dt.name.c_str(), s.stage, s.offload ? "true" : "false",
                      r.profiled ? "true" : "false", world, static_cast<long>(psi),
                      upper_median(r.fwd), upper_median(r.bwd), upper_median(r.wait),
                      upper_median(r.opt), step_ms, tokens_per_s,
                      static_cast<long>(m.model_state_bytes()), formula, rss_mib * 1024 * 1024,
                      static_cast<long>(engine.skipped_steps()));
        rows.push_back(buf);
      }
    }
  if (rank == 0 && !json.empty()) {
    std::ofstream f(json);
    ZT_CHECK(f.good(), "cannot write --json file ", json);
    for (const auto& r : rows) f << r << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_main("zt_bench_train_step", [&] { return run(argc, argv); });
}
