// optim_bench: how fast CpuAdam steps a flat fp32 shard, against LibTorch's torch::optim::AdamW
// on the same tensor and against this machine's memory bandwidth (a STREAM triad) measured in the
// same run. Rows are interleaved per repetition (triad, CpuAdam, AdamW, ...) and reported as
// medians, because the machine is shared.
//
//   optim_bench [--sizes 10,50,200] [--reps 3] [--threads N] [--simd auto|avx512|avx2|scalar]
//               [--adam8bit-sizes 10] [--json FILE]
//
// Bytes each kind must move per parameter (what gbps is computed from):
//   triad       12  (a = b + s * c: read 2 floats, write 1)
//   cpu_adam    30  (read p, g, m, v; write p, m, v and the bf16 copy)
//   torch_adamw 28  (the same minimum without a half copy; torch itself moves more)
//   adam8bit    10  (read p, g and 2 bytes of codes; write p and 2 bytes of codes)

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "core/base/error.h"
#include "optim/cpu_adam.h"
#include "optim/shard_optimizer.h"

namespace {

struct Options {
  std::vector<int64_t> sizes_m = {10, 50, 200};
  std::vector<int64_t> adam8bit_sizes_m = {10};
  int reps = 3;
  int threads = 0;
  std::string simd = "auto";
  std::string json;
};

struct Row {
  std::string kind;
  int64_t params = 0;
  int threads = 0;
  std::string simd;
  double seconds_median = 0;
  double params_per_s = 0;
  double gbps = 0;
  double pct_of_triad = 0;      // gbps / triad gbps * 100 (0 for the triad itself)
  double speedup_vs_torch = 0;  // params_per_s / torch_adamw params_per_s (cpu_adam, adam8bit)
  double state_bytes_per_param = 0;
};

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoll(item));
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      ZT_CHECK(i + 1 < argc, "optim_bench: ", a, " needs a value");
      return argv[++i];
    };
    if (a == "--sizes") {
      o.sizes_m = parse_list(next());
    } else if (a == "--adam8bit-sizes") {
      o.adam8bit_sizes_m = parse_list(next());
    } else if (a == "--reps") {
      o.reps = std::stoi(next());
    } else if (a == "--threads") {
      o.threads = std::stoi(next());
    } else if (a == "--simd") {
      o.simd = next();
    } else if (a == "--json") {
      o.json = next();
    } else {
      ZT_THROW("optim_bench: unknown option ", a,
               " (--sizes, --adam8bit-sizes, --reps, --threads, --simd, --json)");
    }
  }
  ZT_CHECK(o.reps >= 1, "optim_bench: --reps must be >= 1");
  return o;
}

double seconds(const std::function<void()>& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// a = b + s * c, as STREAM's triad (fp32), through ATen's vectorised, multi-threaded add: a plain
// loop here would not be vectorised at -O2, and the triad must measure memory, not the core.
void triad(at::Tensor& a, const at::Tensor& b, const at::Tensor& c, float s) {
  at::add_out(a, b, c, s);
}

std::vector<Row> bench_size(const Options& o, int64_t n, bool with_8bit) {
  // One parameter tensor shared by both optimizers: its storage is CpuAdam's master and its
  // .grad() the gradient, so the two sides touch the same bytes (and peak memory stays low).
  torch::Tensor param = torch::rand({n}).sub_(0.5).requires_grad_(true);
  param.mutable_grad() = torch::rand({n}).sub_(0.5).mul_(1e-2);
  torch::Tensor master = param.detach();
  torch::Tensor grad = param.grad();
  torch::Tensor half = torch::empty({n}, torch::kBFloat16);
  // Triad arrays: bandwidth does not depend on size beyond the caches; cap them at 50M.
  const int64_t tn = std::min<int64_t>(n, 50'000'000);
  torch::Tensor ta = torch::empty({tn}), tb = torch::rand({tn}), tc = torch::rand({tn});

  zt::optim::OptimizerSpec spec;
  spec.type = "CpuAdam";
  spec.simd = o.simd;
  auto cpu_adam = zt::optim::make_shard_optimizer(spec);
  const std::string simd =
      zt::optim::simd_path_name(static_cast<zt::optim::CpuAdam&>(*cpu_adam).simd_path());
  zt::optim::GroupHyper h;
  h.weight_decay = 0.01;
  h.lr = 1e-4;
  const std::vector<zt::optim::GroupRange> groups{{0, n, h}};
  torch::optim::AdamW torch_adamw({param}, torch::optim::AdamWOptions(1e-4).weight_decay(0.01));

  std::unique_ptr<zt::optim::ShardOptimizer> adam8;
  if (with_8bit) {
    spec.type = "Adam8bit";
    adam8 = zt::optim::make_shard_optimizer(spec);
  }
  // Warm-up: first touches, state allocation.
  triad(ta, tb, tc, 3.0f);
  cpu_adam->step(master, grad, groups, &half);
  torch_adamw.step();
  if (adam8) adam8->step(master, grad, groups);

  std::vector<double> t_triad, t_cpu, t_torch, t_8bit;
  for (int r = 0; r < o.reps; ++r) {
    t_triad.push_back(seconds([&] { triad(ta, tb, tc, 3.0f); }));
    t_cpu.push_back(seconds([&] { cpu_adam->step(master, grad, groups, &half); }));
    t_torch.push_back(seconds([&] { torch_adamw.step(); }));
    if (adam8) t_8bit.push_back(seconds([&] { adam8->step(master, grad, groups); }));
  }
  const int threads = at::get_num_threads();
  auto row = [&](const std::string& kind, int64_t elems, double t, double bytes_per) {
    Row x;
    x.kind = kind;
    x.params = elems;
    x.threads = threads;
    x.simd = kind == "cpu_adam" ? simd : "";
    x.seconds_median = t;
    x.params_per_s = elems / t;
    x.gbps = bytes_per * elems / t / 1e9;
    return x;
  };
  std::vector<Row> rows;
  rows.push_back(row("triad", tn, median(t_triad), 12));
  rows.push_back(row("torch_adamw", n, median(t_torch), 28));
  rows.back().state_bytes_per_param = 8;
  rows.push_back(row("cpu_adam", n, median(t_cpu), 30));
  rows.back().state_bytes_per_param = static_cast<double>(cpu_adam->state_bytes()) / n;
  if (adam8) {
    rows.push_back(row("adam8bit", n, median(t_8bit), 10));
    rows.back().state_bytes_per_param = static_cast<double>(adam8->state_bytes()) / n;
  }
  for (Row& x : rows) {
    if (x.kind != "triad") x.pct_of_triad = 100 * x.gbps / rows[0].gbps;
    if (x.kind == "cpu_adam" || x.kind == "adam8bit")
      x.speedup_vs_torch = x.params_per_s / rows[1].params_per_s;
  }
  return rows;
}

void print(const std::vector<Row>& rows) {
  std::printf("%-12s %11s %7s %7s %10s %13s %8s %9s %9s %12s\n", "kind", "params", "threads",
              "simd", "median_s", "params/s", "GB/s", "%triad", "xtorch", "state B/p");
  for (const Row& r : rows) {
    std::printf("%-12s %11lld %7d %7s %10.4f %13.4g %8.2f %9.1f %9.2f %12.3f\n", r.kind.c_str(),
                static_cast<long long>(r.params), r.threads, r.simd.empty() ? "-" : r.simd.c_str(),
                r.seconds_median, r.params_per_s, r.gbps, r.pct_of_triad, r.speedup_vs_torch,
                r.state_bytes_per_param);
  }
}

void write_json(const std::vector<Row>& rows, const std::string& path) {
  std::ofstream f(path);
  ZT_CHECK(f.good(), "optim_bench: cannot write ", path);
  for (const Row& r : rows) {
    f << "{\"bench\":\"optim\",\"kind\":\"" << r.kind << "\",\"params\":" << r.params
      << ",\"threads\":" << r.threads << ",\"simd\":\"" << r.simd
      << "\",\"seconds_median\":" << r.seconds_median << ",\"params_per_s\":" << r.params_per_s
      << ",\"gbps\":" << r.gbps << ",\"pct_of_triad\":" << r.pct_of_triad
      << ",\"speedup_vs_torch_adamw\":" << r.speedup_vs_torch
      << ",\"state_bytes_per_param\":" << r.state_bytes_per_param << "}\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = parse(argc, argv);
    if (o.threads > 0) at::set_num_threads(o.threads);
    std::vector<Row> all;
    for (int64_t m : o.sizes_m) {
      const bool with_8bit = std::find(o.adam8bit_sizes_m.begin(), o.adam8bit_sizes_m.end(), m) !=
                             o.adam8bit_sizes_m.end();
      auto rows = bench_size(o, m * 1'000'000, with_8bit);
      all.insert(all.end(), rows.begin(), rows.end());
    }
    print(all);
    if (!o.json.empty()) write_json(all, o.json);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "optim_bench: %s\n", e.what());
    return 1;
  }
}
