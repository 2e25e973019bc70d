// bench/recording: the cost per collective of the recording communicator
// (parallel/recording_communicator.h): the backend bare (what create_communicator returns with
// the flight recorder and the comms logger off), with the flight recorder on (its default), and
// with the comms logger on as well. Small all-reduces issued and waited one by one, so the
// collective itself is as short as it gets and the wrapper's share as large as it gets; the
// variants take turns, round after round, so load changes hit them alike.
//
//   mpirun -np 2 build/bin/zt_bench_recording [--ops 20000] [--rounds 7] [--numel 16]
//
// Prints per variant the median over rounds of microseconds per collective (rank 0).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "base/main_guard.h"
#include "parallel/dist.h"
#include "parallel/recording_communicator.h"

namespace {

double us_per_op(zt::dist::Communicator& comm, int ops, int64_t numel) {
  at::Tensor t = torch::ones({numel});
  comm.barrier()->wait();
  const auto begin = std::chrono::steady_clock::now();
  for (int i = 0; i < ops; ++i) comm.all_reduce(t)->wait();
  const auto end = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::micro>(end - begin).count() / ops;
}

int bench(int argc, char** argv) {
  int ops = 20000, rounds = 7;
  int64_t numel = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--ops")) ops = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--numel")) numel = std::atoll(argv[i + 1]);
  }
  zt::dist::CommOptions o;
  o.flight = zt::dist::FlightOptions{.capacity = 0};
  auto bare = zt::dist::create_communicator(o);
  zt::dist::CommsLoggerOptions logger_on;
  logger_on.enabled = true;
  auto flight = zt::dist::record_collectives(bare, zt::dist::FlightOptions{}, {});
  auto both = zt::dist::record_collectives(bare, zt::dist::FlightOptions{}, logger_on);
  struct Variant {
    const char* name;
    zt::dist::Communicator* comm;
    std::vector<double> samples;
  };
  std::vector<Variant> variants = {{"bare (recorder and logger off)", bare.get(), {}},
                                   {"flight recorder on (2000 entries)", flight.get(), {}},
                                   {"flight recorder + comms logger on", both.get(), {}}};
  for (int r = 0; r < rounds; ++r) {
    for (Variant& v : variants) v.samples.push_back(us_per_op(*v.comm, ops, numel));
  }
  if (bare->rank() != 0) return 0;
  std::printf("%d ranks, %s backend, all_reduce of %lld floats, %d ops x %d rounds\n", bare->size(),
              bare->backend().c_str(), static_cast<long long>(numel), ops, rounds);
  for (Variant& v : variants) {
    std::sort(v.samples.begin(), v.samples.end());
    std::printf("  %-36s median %.3f us/op (min %.3f, max %.3f)\n", v.name,
                v.samples[v.samples.size() / 2], v.samples.front(), v.samples.back());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_main("zt_bench_recording", [&] { return bench(argc, argv); });
}
