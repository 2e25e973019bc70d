// commbench: collective bandwidth per backend, against the same collective called directly on MPI
// in the same run (like nccl-tests). Run under mpirun:
//
//   mpirun -np 2 build/bin/zt_commbench [--backends mpi,gloo] [--ops all_reduce,reduce_scatter,
//       reduce_scatter_in_place,all_gather] [--min-bytes 1024] [--max-bytes 268435456] [--reps 5]
//       [--json FILE]
//
// For each collective and size (x4 steps), the implementations ("mpi-direct": blocking
// MPI_Allreduce / MPI_Reduce_scatter_block / MPI_Allgather on MPI_COMM_WORLD with no zerotorch
// code; then each zerotorch backend: issue + wait through the Communicator) run interleaved, rep
// after rep, so machine noise hits all alike; each rep times `iters` back-to-back collectives
// (slowest rank's time), and the table reports the median rep.
//   bytes: the full buffer (all_reduce: the tensor; reduce_scatter: the input; all_gather: the
//   output), fp32. reduce_scatter_in_place is ZeRO's layout: the output is this rank's own slice
//   of the input (directly: MPI_IN_PLACE, then the shard copied from the front to its slice).
//   algbw = bytes / time; busbw = algbw * 2(n-1)/n for all_reduce, * (n-1)/n for the others
//   (nccl-tests' convention: what each link carries).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <mpi.h>

#include "base/error.h"
#include "base/main_guard.h"
#include "bench/common/bench_stats.h"
#include "parallel/dist.h"

namespace {

using zt::bench::median;
using zt::dist::Communicator;

struct Options {
  // mpi (mode auto), mpi-nb (non-blocking MPI calls), mpi-b (blocking calls on the progress
  // thread), gloo.
  std::vector<std::string> backends = {"mpi", "mpi-nb", "mpi-b", "gloo"};
  std::vector<std::string> ops = {"all_reduce", "reduce_scatter", "reduce_scatter_in_place",
                                  "all_gather"};
  int64_t min_bytes = 1024;
  int64_t max_bytes = 256LL << 20;
  int reps = 5;
  double rep_seconds = 0.05;           // target time of one rep (sets iters per size)
  int64_t overlap_bytes = 16LL << 20;  // 0 = skip the overlap section
  std::string json;
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      ZT_CHECK(i + 1 < argc, "commbench: ", a, " needs a value");
      return argv[++i];
    };
    if (a == "--backends") {
      o.backends = split_list(value());
    } else if (a == "--ops") {
      o.ops = split_list(value());
    } else if (a == "--min-bytes") {
      o.min_bytes = std::stoll(value());
    } else if (a == "--max-bytes") {
      o.max_bytes = std::stoll(value());
    } else if (a == "--reps") {
      o.reps = std::stoi(value());
    } else if (a == "--rep-seconds") {
      o.rep_seconds = std::stod(value());
    } else if (a == "--overlap-bytes") {
      o.overlap_bytes = std::stoll(value());
    } else if (a == "--json") {
      o.json = value();
    } else {
      ZT_THROW("commbench: unknown argument '", a,
               "' (--backends, --ops, --min-bytes, --max-bytes, --reps, --rep-seconds, "
               "--overlap-bytes, --json)");
    }
  }
  for (const std::string& op : o.ops) {
    ZT_CHECK(op == "all_reduce" || op == "reduce_scatter" || op == "reduce_scatter_in_place" ||
                 op == "all_gather",
             "commbench: --ops takes all_reduce, reduce_scatter, reduce_scatter_in_place, "
             "all_gather; got '",
             op, "'");
  }
  ZT_CHECK(o.min_bytes >= 4 && o.min_bytes <= o.max_bytes, "commbench: bad byte range");
  ZT_CHECK(o.reps >= 1, "commbench: --reps must be >= 1");
  return o;
}

// One implementation of one collective at one size: runs `iters` collectives back to back.
using Runner = std::function<void(int iters)>;

double max_over_ranks(double x) {
  double m = 0;
  MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

// Seconds for `iters` collectives, slowest rank.
double time_once(const Runner& run, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  auto t0 = std::chrono::steady_clock::now();
  run(iters);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return max_over_ranks(s);
}

struct Impl {
  std::string name;
  Runner run;
};

std::vector<Impl> make_impls(const std::string& op, int64_t count, int world,
                             const std::map<std::string, std::shared_ptr<Communicator>>& comms,
                             at::Tensor& a, at::Tensor& b) {
  // a: the full buffer (count fp32); b: one shard (count / world).
  std::vector<Impl> impls;
  float* pa = a.data_ptr<float>();
  float* pb = b.data_ptr<float>();
  const int n = static_cast<int>(count);
  const int shard = static_cast<int>(count / world);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // In place, a rank's own slice is summed into again on every iteration: zeros stay finite.
  if (op == "reduce_scatter_in_place") a.zero_();
  if (op == "all_reduce") {
    impls.push_back({"mpi-direct", [=](int iters) {
                       for (int i = 0; i < iters; ++i) {
                         MPI_Allreduce(MPI_IN_PLACE, pa, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                       }
                     }});
  } else if (op == "reduce_scatter") {
    impls.push_back({"mpi-direct", [=](int iters) {
                       for (int i = 0; i < iters; ++i) {
                         MPI_Reduce_scatter_block(pa, pb, shard, MPI_FLOAT, MPI_SUM,
                                                  MPI_COMM_WORLD);
                       }
                     }});
  } else if (op == "reduce_scatter_in_place") {
    impls.push_back({"mpi-direct", [=](int iters) {
                       for (int i = 0; i < iters; ++i) {
                         MPI_Reduce_scatter_block(MPI_IN_PLACE, pa, shard, MPI_FLOAT, MPI_SUM,
                                                  MPI_COMM_WORLD);
                         if (rank != 0) {
                           std::memcpy(pa + static_cast<int64_t>(rank) * shard, pa,
                                       static_cast<size_t>(shard) * sizeof(float));
                         }
                       }
                     }});
  } else {
    impls.push_back({"mpi-direct", [=](int iters) {
                       for (int i = 0; i < iters; ++i) {
                         MPI_Allgather(pb, shard, MPI_FLOAT, pa, shard, MPI_FLOAT, MPI_COMM_WORLD);
                       }
                     }});
  }
  for (const auto& [name, comm] : comms) {
    Communicator* c = comm.get();
    if (op == "all_reduce") {
      impls.push_back({"zt-" + name, [c, &a](int iters) {
                         for (int i = 0; i < iters; ++i) c->all_reduce(a)->wait();
                       }});
    } else if (op == "reduce_scatter") {
      impls.push_back({"zt-" + name, [c, &a, &b](int iters) {
                         for (int i = 0; i < iters; ++i) c->reduce_scatter(a, b)->wait();
                       }});
    } else if (op == "reduce_scatter_in_place") {
      at::Tensor own = a.narrow(0, static_cast<int64_t>(rank) * shard, shard);
      impls.push_back({"zt-" + name, [c, &a, own](int iters) mutable {
                         for (int i = 0; i < iters; ++i) c->reduce_scatter(a, own)->wait();
                       }});
    } else {
      impls.push_back({"zt-" + name, [c, &a, &b](int iters) {
                         for (int i = 0; i < iters; ++i) c->all_gather(b, a)->wait();
                       }});
    }
  }
  return impls;
}

double bus_factor(const std::string& op, int world) {
  double n = world;
  return op == "all_reduce" ? 2.0 * (n - 1) / n : (n - 1) / n;
}

// Overlap: an all-reduce started before the caller computes, waited after. Compute is sized to
// last about as long as the all-reduce alone; hidden = (comm + compute - both) / min(comm,
// compute): 1 when the all-reduce is fully hidden behind the computation, 0 when nothing moves
// until wait(). "mpi-direct-nb" is MPI_Iallreduce + compute + MPI_Wait with no progress thread:
// OpenMPI 4.1 has no asynchronous progress, which is why the mpi backend runs one.
void overlap_section(const Options& o,
                     const std::map<std::string, std::shared_ptr<Communicator>>& comms, int rank,
                     std::ofstream& json) {
  const int64_t count = o.overlap_bytes / 4;
  at::Tensor a = at::ones({count}, at::kFloat);
  at::Tensor x = at::rand({192, 192});
  auto compute = [&](int steps) {
    at::Tensor y = x;
    for (int i = 0; i < steps; ++i) y = at::mm(y, x).tanh_();
  };
  std::vector<std::pair<std::string, std::function<std::function<void()>()>>> impls;
  impls.push_back({"mpi-direct-nb", [&]() -> std::function<void()> {
                     auto* req = new MPI_Request;
                     MPI_Iallreduce(MPI_IN_PLACE, a.data_ptr<float>(), static_cast<int>(count),
                                    MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, req);
                     return [req] {
                       MPI_Wait(req, MPI_STATUS_IGNORE);
                       delete req;
                     };
                   }});
  for (const auto& [name, comm] : comms) {
    Communicator* c = comm.get();
    impls.push_back({"zt-" + name, [c, &a]() -> std::function<void()> {
                       zt::dist::WorkPtr w = c->all_reduce(a);
                       return [w] { w->wait(); };
                     }});
  }
  // Compute steps per microsecond, measured once.
  auto t0 = std::chrono::steady_clock::now();
  compute(50);
  double us_per_step =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 50;
  if (rank == 0) {
    std::printf("\noverlap: all_reduce of %lld bytes started, then matmuls, then wait\n",
                static_cast<long long>(count * 4));
    std::printf("%-15s %12s %12s %12s %8s\n", "impl", "comm_us", "compute_us", "both_us", "hidden");
  }
  for (auto& [name, start] : impls) {
    std::vector<double> comm_t, comp_t, both_t;
    int steps = 0;
    for (int rep = 0; rep < o.reps + 1; ++rep) {
      MPI_Barrier(MPI_COMM_WORLD);
      auto s0 = std::chrono::steady_clock::now();
      start()();
      double tc =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s0).count();
      tc = max_over_ranks(tc);
      if (steps == 0) steps = std::max(1, static_cast<int>(tc / us_per_step));
      MPI_Barrier(MPI_COMM_WORLD);
      s0 = std::chrono::steady_clock::now();
      compute(steps);
      double tp = max_over_ranks(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s0).count());
      MPI_Barrier(MPI_COMM_WORLD);
      s0 = std::chrono::steady_clock::now();
      auto finish = start();
      compute(steps);
      finish();
      double tb = max_over_ranks(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s0).count());
      if (rep == 0) continue;  // warm-up
      comm_t.push_back(tc);
      comp_t.push_back(tp);
      both_t.push_back(tb);
    }
    double tc = median(comm_t), tp = median(comp_t), tb = median(both_t);
    double hidden = (tc + tp - tb) / std::min(tc, tp);
    if (rank != 0) continue;
    std::printf("%-15s %12.1f %12.1f %12.1f %8.2f\n", name.c_str(), tc, tp, tb, hidden);
    if (json.is_open()) {
      json << "{\"collective\":\"all_reduce_overlap\",\"impl\":\"" << name
           << "\",\"bytes\":" << count * 4 << ",\"comm_us\":" << tc << ",\"compute_us\":" << tp
           << ",\"both_us\":" << tb << ",\"hidden_fraction\":" << hidden << "}\n";
    }
  }
}

int run(int argc, char** argv) {
  Options o = parse(argc, argv);
  at::set_num_threads(1);  // ranks share the cores; intra-op threads would fight the collectives
  // Creating an mpi communicator initialises MPI (with MPI_THREAD_MULTIPLE), which the direct
  // baseline then uses from this thread.
  std::map<std::string, std::shared_ptr<Communicator>> comms;
  for (const std::string& b : o.backends) {
    zt::dist::CommOptions options;
    options.backend = zt::dist::parse_backend(b.rfind("mpi", 0) == 0 ? "mpi" : b);
    if (b == "mpi-nb") options.mpi_mode = "nonblocking";
    if (b == "mpi-b") options.mpi_mode = "blocking";
    options.timeout = std::chrono::minutes(5);
    comms[b] = zt::dist::create_communicator(options);
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  ZT_CHECK(initialized, "commbench needs mpirun and the mpi backend (for the direct baseline)");
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);

  std::ofstream json;
  if (rank == 0 && !o.json.empty()) {
    json.open(o.json);
    ZT_CHECK(json.good(), "commbench: cannot write ", o.json);
  }
  if (rank == 0) {
    std::printf("commbench: %d ranks, fp32, median of %d reps\n", world, o.reps);
    std::printf("%-15s %12s %-11s %6s %12s %11s %11s %9s\n", "collective", "bytes", "impl", "iters",
                "time_us", "algbw_GB/s", "busbw_GB/s", "vs_direct");
  }
  for (const std::string& op : o.ops) {
    for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
      int64_t count = bytes / 4;
      count -= count % world;
      if (count == 0) continue;
      at::Tensor a = at::ones({count}, at::kFloat);
      at::Tensor b = at::ones({count / world}, at::kFloat);
      std::vector<Impl> impls = make_impls(op, count, world, comms, a, b);
      // Warm-up, and iters from the direct baseline's time so each rep lasts ~rep_seconds.
      for (const Impl& impl : impls) impl.run(1);
      double one = time_once(impls[0].run, 1);
      int iters = static_cast<int>(std::clamp(o.rep_seconds / std::max(one, 1e-7), 1.0, 1000.0));
      std::vector<std::vector<double>> times(impls.size());
      for (int rep = 0; rep < o.reps; ++rep) {
        for (size_t k = 0; k < impls.size(); ++k) {
          times[k].push_back(time_once(impls[k].run, iters) / iters);
        }
      }
      double direct_busbw = 0;
      for (size_t k = 0; k < impls.size(); ++k) {
        double t = median(times[k]);
        double algbw = static_cast<double>(count * 4) / t / 1e9;
        double busbw = algbw * bus_factor(op, world);
        if (k == 0) direct_busbw = busbw;
        double ratio = busbw / direct_busbw;
        if (rank != 0) continue;
        std::printf("%-15s %12lld %-11s %6d %12.1f %11.3f %11.3f %9.3f\n", op.c_str(),
                    static_cast<long long>(count * 4), impls[k].name.c_str(), iters, t * 1e6, algbw,
                    busbw, ratio);
        if (json.is_open()) {
          json << "{\"collective\":\"" << op << "\",\"impl\":\"" << impls[k].name
               << "\",\"ranks\":" << world << ",\"bytes\":" << count * 4 << ",\"iters\":" << iters
               << ",\"time_us\":" << t * 1e6 << ",\"algbw_gbps\":" << algbw
               << ",\"busbw_gbps\":" << busbw << ",\"busbw_ratio_vs_direct\":" << ratio << "}\n";
        }
      }
      std::fflush(stdout);
    }
  }
  if (o.overlap_bytes > 0) overlap_section(o, comms, rank, json);
  for (auto& [name, comm] : comms) comm->barrier()->wait();
  comms.clear();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_main("zt_commbench", [&] { return run(argc, argv); });
}
