// optim_bench: how fast zerotorch's optimizers step a flat fp32 shard, against PyTorch's own
// kernels on the same tensors, and against this machine's memory bandwidth measured in the same
// run. Rows are interleaved per repetition and reported as medians, because the machine is shared.
//
//   optim_bench [--sizes 10,50,200] [--reps 3] [--threads N] [--simd auto|avx512|avx2|scalar]
//               [--adam8bit-sizes 10] [--bandwidth-mib 256] [--json FILE]
//
// Rows per size (params in millions):
//   torch_adamw   LibTorch's torch::optim::AdamW (the C++ frontend's reference loop)
//   fused_adamw   at::_fused_adamw_, the kernel behind torch.optim.AdamW(fused=True)
//   cpu_adam      zt CpuAdam with its bf16 copy
//   cpu_adam_f32  zt CpuAdam without the copy: exactly fused_adamw's work
//   adam8bit      zt Adam8bit with its bf16 copy (--adam8bit-sizes)
//   torch_step    what a PyTorch loop runs for a clipped AdamW step with a bf16 model copy:
//                 clip_grad_norm_'s norm and in-place scale, at::_fused_adamw_, copy_ to bf16
//   zt_step       the same work as the engine's sharded step does it (core/zero/sharded_step.cpp):
//                 optim::sum_of_squares, then CpuAdam with the clipping factor as its grad_scale,
//                 writing the bf16 copy in the same pass (the gradient is never rewritten)
// Bandwidth rows, once, on arrays of --bandwidth-mib MiB each (far above the caches), through
// ATen's multi-threaded kernels: read (sum), copy (b = a), triad (a = b + s * c).
// Bytes each row must move per parameter (what GB/s is computed from):
//   torch_adamw, fused_adamw 28 (read p, g, m, v; write p, m, v)
//   cpu_adam_f32 28, cpu_adam 30 (the same plus the bf16 copy), adam8bit 18 (p, g, 2 code bytes, p,
//   2 code bytes, the bf16 copy), torch_step 46 (norm 4, scale 8, adamw 28, copy 6), zt_step 34
//   (norm 4, adam 30); %bw is GB/s against the triad's.

#include <algorithm>
#include <chrono>
#include <cmath>
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
#include "optim/clip.h"
#include "optim/cpu_adam.h"
#include "optim/shard_optimizer.h"

namespace {

struct Options {
  std::vector<int64_t> sizes_m = {10, 50, 200};
  std::vector<int64_t> adam8bit_sizes_m = {10};
  int reps = 3;
  int threads = 0;
  std::string simd = "auto";
  int64_t bandwidth_mib = 256;
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
  double pct_of_triad = 0;      // gbps / the bandwidth triad's gbps * 100
  double speedup_vs_torch = 0;  // params_per_s / fused_adamw's (zt_step: / torch_step's)
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
    } else if (a == "--bandwidth-mib") {
      o.bandwidth_mib = std::stoll(next());
    } else if (a == "--json") {
      o.json = next();
    } else {
      ZT_THROW("optim_bench: unknown option ", a,
               " (--sizes, --adam8bit-sizes, --reps, --threads, --simd, --bandwidth-mib, --json)");
    }
  }
  ZT_CHECK(o.reps >= 1, "optim_bench: --reps must be >= 1");
  ZT_CHECK(o.bandwidth_mib >= 64, "optim_bench: --bandwidth-mib must be >= 64 (above the caches)");
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

Row make_row(const std::string& kind, int64_t elems, double t, double bytes_per) {
  Row x;
  x.kind = kind;
  x.params = elems;
  x.threads = at::get_num_threads();
  x.seconds_median = t;
  x.params_per_s = elems / t;
  x.gbps = bytes_per * elems / t / 1e9;
  return x;
}

// Read, copy and triad bandwidth over arrays of `mib` MiB each, through ATen's vectorised,
// multi-threaded kernels (a plain loop here would not be vectorised at -O2 nor threaded).
std::vector<Row> bandwidth(const Options& o) {
  const int64_t n = o.bandwidth_mib * (1 << 20) / 4;
  torch::Tensor a = torch::rand({n}), b = torch::rand({n}), c = torch::rand({n});
  std::vector<double> t_read, t_copy, t_triad;
  double sink = 0;
  for (int r = 0; r < o.reps + 1; ++r) {  // the first round warms up
    const double tr = seconds([&] { sink += a.sum().item<double>(); });
    const double tc = seconds([&] { b.copy_(a); });
    const double tt = seconds([&] { at::add_out(a, b, c, 3.0f); });
    if (r == 0) continue;
    t_read.push_back(tr);
    t_copy.push_back(tc);
    t_triad.push_back(tt);
  }
  if (sink == 42) std::printf(" ");  // keeps the sums alive
  return {make_row("bw_read", n, median(t_read), 4), make_row("bw_copy", n, median(t_copy), 8),
          make_row("bw_triad", n, median(t_triad), 12)};
}

std::vector<Row> bench_size(const Options& o, int64_t n, bool with_8bit) {
  const float lr = 1e-4f, wd = 0.01f, max_norm = 1.0f;
  // One parameter tensor shared by the LibTorch optimizers: its storage is CpuAdam's master and
  // its .grad() the gradient, so every row touches the same bytes (and peak memory stays low).
  torch::Tensor param = torch::rand({n}).sub_(0.5).requires_grad_(true);
  param.mutable_grad() = torch::rand({n}).sub_(0.5).mul_(1e-2);
  torch::Tensor master = param.detach();
  torch::Tensor grad = param.grad();
  torch::Tensor half = torch::empty({n}, torch::kBFloat16);

  zt::optim::OptimizerSpec spec;
  spec.type = "CpuAdam";
  spec.simd = o.simd;
  auto cpu_adam = zt::optim::make_shard_optimizer(spec);
  const std::string simd =
      zt::optim::simd_path_name(static_cast<zt::optim::CpuAdam&>(*cpu_adam).simd_path());
  zt::optim::GroupHyper h;
  h.weight_decay = wd;
  h.lr = lr;
  const std::vector<zt::optim::GroupRange> groups{{0, n, h}};
  torch::optim::AdamW torch_adamw({param}, torch::optim::AdamWOptions(lr).weight_decay(wd));
  // at::_fused_adamw_'s state, as torch.optim.AdamW(fused=True) keeps it: m, v and a float step
  // the caller increments before each call.
  torch::Tensor fm = torch::zeros({n}), fv = torch::zeros({n}), fstep = torch::zeros({});
  auto fused = [&] {
    fstep.add_(1);
    at::_fused_adamw_({master}, {grad}, {fm}, {fv}, {}, {fstep}, lr, 0.9, 0.999, wd, 1e-8, false,
                      false);
  };
  // PyTorch's clipped step with a bf16 model copy: clip_grad_norm_ (norm, then grad *= coef
  // clamped to 1, always applied), the fused AdamW, the copy.
  auto torch_step = [&] {
    const torch::Tensor norm = at::linalg_vector_norm(grad, 2);
    const torch::Tensor coef = (max_norm / (norm + 1e-6)).clamp_max(1.0);
    grad.mul_(coef);
    fused();
    half.copy_(master);
  };
  // The engine's (ShardedStep::step): the fp64-accumulated norm, then CpuAdam's one pass with
  // the clipping factor as grad_scale and the bf16 copy. The gradient here is rescaled every
  // call, so clipping bites every time, as in torch_step.
  std::vector<zt::optim::GroupRange> clipped = groups;
  auto zt_step = [&] {
    const double norm = std::sqrt(zt::optim::sum_of_squares(grad));
    clipped[0].hyper.grad_scale = zt::optim::clip_coefficient(norm, max_norm);
    cpu_adam->step(master, grad, clipped, &half);
  };
  const torch::Tensor g0 = grad.clone();
  auto restore_grad = [&] { grad.copy_(g0).mul_(1e3); };  // norm ~ 1e3 * 0.0029 * sqrt(n) > 1

  std::unique_ptr<zt::optim::ShardOptimizer> adam8;
  if (with_8bit) {
    spec.type = "Adam8bit";
    adam8 = zt::optim::make_shard_optimizer(spec);
  }
  // Warm-up: first touches, state allocation.
  cpu_adam->step(master, grad, groups, &half);
  torch_adamw.step();
  fused();
  if (adam8) adam8->step(master, grad, groups, &half);

  std::vector<double> t_cpu32, t_cpu, t_torch, t_fused, t_8bit, t_tstep, t_zstep;
  for (int r = 0; r < o.reps; ++r) {
    grad.copy_(g0);
    t_cpu.push_back(seconds([&] { cpu_adam->step(master, grad, groups, &half); }));
    t_cpu32.push_back(seconds([&] { cpu_adam->step(master, grad, groups); }));
    t_torch.push_back(seconds([&] { torch_adamw.step(); }));
    t_fused.push_back(seconds(fused));
    if (adam8) t_8bit.push_back(seconds([&] { adam8->step(master, grad, groups, &half); }));
    restore_grad();
    t_tstep.push_back(seconds(torch_step));
    restore_grad();
    t_zstep.push_back(seconds(zt_step));
  }
  std::vector<Row> rows;
  rows.push_back(make_row("torch_adamw", n, median(t_torch), 28));
  rows.back().state_bytes_per_param = 8;
  rows.push_back(make_row("fused_adamw", n, median(t_fused), 28));
  rows.back().state_bytes_per_param = 8;
  rows.push_back(make_row("cpu_adam_f32", n, median(t_cpu32), 28));
  rows.back().simd = simd;
  rows.back().state_bytes_per_param = static_cast<double>(cpu_adam->state_bytes()) / n;
  rows.push_back(make_row("cpu_adam", n, median(t_cpu), 30));
  rows.back().simd = simd;
  rows.back().state_bytes_per_param = static_cast<double>(cpu_adam->state_bytes()) / n;
  if (adam8) {
    rows.push_back(make_row("adam8bit", n, median(t_8bit), 18));
    rows.back().simd = simd;
    rows.back().state_bytes_per_param = static_cast<double>(adam8->state_bytes()) / n;
  }
  rows.push_back(make_row("torch_step", n, median(t_tstep), 46));
  rows.push_back(make_row("zt_step", n, median(t_zstep), 34));
  rows.back().simd = simd;
  return rows;
}

// x_fused: params/s against fused_adamw of the same size (steps: zt_step against torch_step);
// %bw: GB/s against the run's triad.
void relate(std::vector<Row>& rows) {
  double triad = 0;
  for (const Row& r : rows) {
    if (r.kind == "bw_triad") triad = r.gbps;
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    Row& x = rows[i];
    if (x.kind.rfind("bw_", 0) == 0) continue;
    if (triad > 0) x.pct_of_triad = 100 * x.gbps / triad;
    const std::string peer = x.kind == "zt_step" ? "torch_step" : "fused_adamw";
    for (const Row& y : rows) {
      if (y.kind == peer && y.params == x.params)
        x.speedup_vs_torch = x.params_per_s / y.params_per_s;
    }
  }
}

void print(const std::vector<Row>& rows) {
  std::printf("%-12s %11s %7s %7s %10s %13s %8s %9s %9s %12s\n", "kind", "params", "threads",
              "simd", "median_s", "params/s", "GB/s", "%bw", "x_fused", "state B/p");
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
      << ",\"speedup_vs_fused\":" << r.speedup_vs_torch
      << ",\"state_bytes_per_param\":" << r.state_bytes_per_param << "}\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = parse(argc, argv);
    if (o.threads > 0) at::set_num_threads(o.threads);
    std::vector<Row> all = bandwidth(o);
    for (int64_t m : o.sizes_m) {
      const bool with_8bit = std::find(o.adam8bit_sizes_m.begin(), o.adam8bit_sizes_m.end(), m) !=
                             o.adam8bit_sizes_m.end();
      auto rows = bench_size(o, m * 1'000'000, with_8bit);
      all.insert(all.end(), rows.begin(), rows.end());
    }
    relate(all);
    print(all);
    if (!o.json.empty()) write_json(all, o.json);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "optim_bench: %s\n", e.what());
    return 1;
  }
}
