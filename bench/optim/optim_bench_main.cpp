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
// Bandwidth rows, once, before the optimizers: STREAM's four kernels (McCalpin) over three fp32
// arrays of --bandwidth-mib MiB each (STREAM wants 4x the L3: a warning says when they are less),
// on as many threads as the optimizer rows use, each the best of max(--reps, 10) rounds after a
// warm-up:
//   bw_copy c = a, bw_scale b = s * c, bw_add c = a + b, bw_triad a = b + s * c.
// Bytes each row must move per parameter or element (what GB/s is computed from), every byte the
// algorithm reads or writes counted once; write-allocate reads (fetching a line before
// overwriting it) are not counted:
//   torch_adamw, fused_adamw 28 (read p, g, m, v; write p, m, v)
//   cpu_adam_f32 28, cpu_adam 30 (the same plus the bf16 copy), adam8bit 18 (p, g, 2 code bytes, p,
//   2 code bytes, the bf16 copy), torch_step 46 (norm 4, scale 8, adamw 28, copy 6), zt_step 34
//   (norm 4, adam 30); bw_copy, bw_scale 8 (STREAM's 2 arrays), bw_add, bw_triad 12 (3 arrays).
// The bandwidth kernels store non-temporally, so they pay no write-allocate and their count is
// their traffic. An optimizer row's count is a floor of its traffic: p, m, v are written where
// they were just read (no write-allocate), but a bf16 copy written with ordinary stores pays 2
// uncounted bytes a parameter (torch_step's copy_, Adam8bit's, CpuAdam's off its AVX-512 path,
// which streams it) and torch_adamw's frontend loop moves temporaries besides. So %bw, GB/s
// against the fastest bandwidth row (the machine's streaming roofline), stays under 100% unless
// the machine's bandwidth changes between the bandwidth rows and the optimizer rows.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "base/error.h"
#include "bench/common/bench_stats.h"
#include "optim/clip.h"
#include "optim/cpu_adam.h"
#include "optim/shard_optimizer.h"

namespace {

using zt::bench::upper_median;

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
  double pct_of_bw = 0;         // gbps / the fastest bandwidth row's gbps * 100
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

// STREAM's kernels, in its order; each reads the arrays the one before wrote.
enum class StreamKernel { kCopy, kScale, kAdd, kTriad };
constexpr std::array<StreamKernel, 4> kStreamKernels = {StreamKernel::kCopy, StreamKernel::kScale,
                                                        StreamKernel::kAdd, StreamKernel::kTriad};
// STREAM uses 3; below 1, values shrink slowly instead of overflowing (a round multiplies every
// array by 2s + s^2 = 0.96) and stay clear of the slow denormals for 2000 rounds.
constexpr float kStreamScalar = 0.4f;

// Runs one kernel over [begin, end) of the arrays, which are 64-byte aligned there. The stores
// are non-temporal (SSE2 movntps): the line goes to memory from the write-combining buffer, with
// no read of the old contents, which is what makes STREAM's 2- and 3-array counts the real
// traffic. GCC emits no non-temporal store from plain C++, and this file is built without OpenMP
// (`#pragma omp simd` would be ignored), hence intrinsics. 128-bit is wide enough: one core loads
// and stores several times its share of memory bandwidth at that width, so the loop waits on
// memory, not on instructions. Without SSE2 the loop is plain C++ and pays write-allocate, so its
// rates are a lower bound.
void stream_kernel(StreamKernel k, float* __restrict a, float* __restrict b, float* __restrict c,
                   int64_t begin, int64_t end) {
  const float s = kStreamScalar;
#if defined(__SSE2__)
  const __m128 vs = _mm_set1_ps(s);
  switch (k) {
    case StreamKernel::kCopy:
      for (int64_t i = begin; i < end; i += 4) _mm_stream_ps(c + i, _mm_load_ps(a + i));
      break;
    case StreamKernel::kScale:
      for (int64_t i = begin; i < end; i += 4) {
        _mm_stream_ps(b + i, _mm_mul_ps(vs, _mm_load_ps(c + i)));
      }
      break;
    case StreamKernel::kAdd:
      for (int64_t i = begin; i < end; i += 4) {
        _mm_stream_ps(c + i, _mm_add_ps(_mm_load_ps(a + i), _mm_load_ps(b + i)));
      }
      break;
    case StreamKernel::kTriad:
      for (int64_t i = begin; i < end; i += 4) {
        _mm_stream_ps(a + i, _mm_add_ps(_mm_load_ps(b + i), _mm_mul_ps(vs, _mm_load_ps(c + i))));
      }
      break;
  }
  // Non-temporal stores are weakly ordered: drain them before the barrier that ends the kernel.
  _mm_sfence();
#else
  for (int64_t i = begin; i < end; ++i) {
    switch (k) {
      case StreamKernel::kCopy: c[i] = a[i]; break;
      case StreamKernel::kScale: b[i] = s * c[i]; break;
      case StreamKernel::kAdd: c[i] = a[i] + b[i]; break;
      case StreamKernel::kTriad: a[i] = b[i] + s * c[i]; break;
    }
  }
#endif
}

// Generation-counting spin barrier for the bandwidth threads: a kernel takes milliseconds, so waits
// are short, and spinning keeps a sleeping thread's wake-up out of the timings.
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  void wait() {
    const int gen = gen_.load(std::memory_order_acquire);
    if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      count_.store(0, std::memory_order_relaxed);
      gen_.fetch_add(1, std::memory_order_release);
    } else {
      while (gen_.load(std::memory_order_acquire) == gen) std::this_thread::yield();
    }
  }

 private:
  const int n_;
  std::atomic<int> count_{0};
  std::atomic<int> gen_{0};
};

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

// The machine's L3 in bytes, every instance the kernel lists counted once (by the CPUs sharing
// it); 0 when unknown. Not sysconf(_SC_LEVEL3_CACHE_SIZE): on this project's AMD VM that reports
// 384 MiB, the host's, where the VM's two CPUs share one 32 MiB L3.
int64_t l3_bytes() {
  std::set<std::string> seen;
  int64_t total = 0;
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  for (long cpu = 0; cpu < cpus; ++cpu) {
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cache/index3/";
    std::ifstream level(dir + "level"), size(dir + "size"), shared(dir + "shared_cpu_list");
    int l = 0;
    std::string bytes, cpus_sharing;
    if (!(level >> l) || l != 3 || !(size >> bytes) || !(shared >> cpus_sharing)) continue;
    if (!seen.insert(cpus_sharing).second) continue;
    const char unit = bytes.back();
    total += std::atoll(bytes.c_str()) * (unit == 'K' ? 1 << 10 : unit == 'M' ? 1 << 20 : 1);
  }
  return total;
}

// STREAM's rule: each array at least 4x the caches, so no round is served from them.
void warn_if_cached(int64_t array_bytes) {
  const int64_t l3 = l3_bytes();
  if (l3 > 0 && array_bytes < 4 * l3) {
    std::fprintf(stderr,
                 "optim_bench: warning: --bandwidth-mib %lld is under 4x the %lld MiB of L3; the "
                 "bandwidth rows may be served partly from cache\n",
                 static_cast<long long>(array_bytes >> 20), static_cast<long long>(l3 >> 20));
  }
}

// STREAM over arrays of `mib` MiB each, on at::get_num_threads() threads: the optimizer rows'
// at::parallel_for (zt_optim is built with OpenMP) splits their range into that many contiguous
// chunks, and so does this, one chunk per thread, which also first-touches its chunk so its pages
// sit on the thread's NUMA node, as in STREAM. This file is built without OpenMP (its
// at::parallel_for would run serially), hence std::thread. Rates are the best round's, STREAM's
// rule: the kernels' own speed, without the interference a shared machine adds to some rounds.
std::vector<Row> bandwidth(const Options& o) {
  const int64_t n = o.bandwidth_mib * (1 << 20) / 4;  // a multiple of 16: 64-byte chunks
  warn_if_cached(n * 4);
  auto alloc = [&] {
    std::unique_ptr<float, FreeDeleter> p(static_cast<float*>(std::aligned_alloc(64, n * 4)));
    ZT_CHECK(p != nullptr, "optim_bench: cannot allocate ", o.bandwidth_mib,
             " MiB for a bandwidth array (lower --bandwidth-mib)");
    return p;
  };
  auto a_mem = alloc(), b_mem = alloc(), c_mem = alloc();
  float* a = a_mem.get();
  float* b = b_mem.get();
  float* c = c_mem.get();
  const int threads = std::max(1, at::get_num_threads());
  const int rounds = std::max(o.reps, 10) + 1;  // round 0 warms up
  // times[r][k]: round r, kernel k, from the barrier before it to the barrier after it.
  std::vector<std::array<double, 4>> times(rounds);
  SpinBarrier barrier(threads);
  auto run = [&](int t) {
    const int64_t begin = n / 16 * t / threads * 16;
    const int64_t end = n / 16 * (t + 1) / threads * 16;
    for (int64_t i = begin; i < end; ++i) {
      a[i] = 1.0f;
      b[i] = 2.0f;
      c[i] = 0.0f;
    }
    for (int r = 0; r < rounds; ++r) {
      for (size_t k = 0; k < kStreamKernels.size(); ++k) {
        barrier.wait();
        const auto t0 = std::chrono::steady_clock::now();
        stream_kernel(kStreamKernels[k], a, b, c, begin, end);
        barrier.wait();
        if (t == 0) {
          times[r][k] =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
      }
    }
  };
  std::vector<std::thread> team;
  for (int t = 1; t < threads; ++t) team.emplace_back(run, t);
  run(0);
  for (std::thread& th : team) th.join();

  // Every element went through the same float operations: any one that differs from the scalar
  // replay was skipped or written twice (a chunking bug that would inflate the rates).
  float ea = 1.0f, eb = 2.0f, ec = 0.0f;
  const float s = kStreamScalar;
  for (int r = 0; r < rounds; ++r) {
    ec = ea;
    eb = s * ec;
    ec = ea + eb;
    ea = eb + s * ec;
  }
  for (int64_t i = 0; i < n; i += 4093) {
    ZT_CHECK(a[i] == ea && b[i] == eb && c[i] == ec, "optim_bench: bandwidth kernels gave (", a[i],
             ", ", b[i], ", ", c[i], ") at element ", i, ", expected (", ea, ", ", eb, ", ", ec,
             ")");
  }

  const std::array<const char*, 4> names = {"bw_copy", "bw_scale", "bw_add", "bw_triad"};
  const std::array<double, 4> bytes = {8, 8, 12, 12};
  std::vector<Row> rows;
  for (size_t k = 0; k < names.size(); ++k) {
    double best = times[1][k];
    for (int r = 2; r < rounds; ++r) best = std::min(best, times[r][k]);
    rows.push_back(make_row(names[k], n, best, bytes[k]));
    rows.back().threads = threads;
  }
  return rows;
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
  spec.type = zt::optim::OptimizerKind::kCpuAdam;
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
    spec.type = zt::optim::OptimizerKind::kAdam8bit;
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
  rows.push_back(make_row("torch_adamw", n, upper_median(t_torch), 28));
  rows.back().state_bytes_per_param = 8;
  rows.push_back(make_row("fused_adamw", n, upper_median(t_fused), 28));
  rows.back().state_bytes_per_param = 8;
  rows.push_back(make_row("cpu_adam_f32", n, upper_median(t_cpu32), 28));
  rows.back().simd = simd;
  rows.back().state_bytes_per_param = static_cast<double>(cpu_adam->state_bytes()) / n;
  rows.push_back(make_row("cpu_adam", n, upper_median(t_cpu), 30));
  rows.back().simd = simd;
  rows.back().state_bytes_per_param = static_cast<double>(cpu_adam->state_bytes()) / n;
  if (adam8) {
    rows.push_back(make_row("adam8bit", n, upper_median(t_8bit), 18));
    rows.back().simd = simd;
    rows.back().state_bytes_per_param = static_cast<double>(adam8->state_bytes()) / n;
  }
  rows.push_back(make_row("torch_step", n, upper_median(t_tstep), 46));
  rows.push_back(make_row("zt_step", n, upper_median(t_zstep), 34));
  rows.back().simd = simd;
  return rows;
}

bool is_bandwidth_row(const Row& r) {
  return r.kind.rfind("bw_", 0) == 0;
}

// x_fused: params/s against fused_adamw of the same size (steps: zt_step against torch_step);
// %bw: GB/s against the fastest bandwidth row of the run (the bandwidth rows against it too).
void relate(std::vector<Row>& rows) {
  double roofline = 0;
  for (const Row& r : rows) {
    if (is_bandwidth_row(r)) roofline = std::max(roofline, r.gbps);
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    Row& x = rows[i];
    if (roofline > 0) x.pct_of_bw = 100 * x.gbps / roofline;
    if (is_bandwidth_row(x)) continue;
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
                r.seconds_median, r.params_per_s, r.gbps, r.pct_of_bw, r.speedup_vs_torch,
                r.state_bytes_per_param);
  }
}

// "pct_of_triad" keeps its name for existing readers; it is the %bw column, now against the
// fastest bandwidth row. For bandwidth rows "seconds_median" is the best round's time.
void write_json(const std::vector<Row>& rows, const std::string& path) {
  std::ofstream f(path);
  ZT_CHECK(f.good(), "optim_bench: cannot write ", path);
  for (const Row& r : rows) {
    f << "{\"bench\":\"optim\",\"kind\":\"" << r.kind << "\",\"params\":" << r.params
      << ",\"threads\":" << r.threads << ",\"simd\":\"" << r.simd
      << "\",\"seconds_median\":" << r.seconds_median << ",\"params_per_s\":" << r.params_per_s
      << ",\"gbps\":" << r.gbps << ",\"pct_of_triad\":" << r.pct_of_bw
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
