// The foundation's smoke job: every rank fills a LibTorch tensor with (rank + 1), MPI sums it in
// place, and each rank checks the closed form 1 + 2 + ... + N = N (N + 1) / 2 in every element.
// Run: mpirun -np 2 build/bin/zt_allreduce_smoke [--numel N]
#include <cstdlib>
#include <string>

#include <mpi.h>
#include <torch/torch.h>

#include "base/error.h"
#include "base/logging.h"
#include "base/main_guard.h"

namespace {

int64_t parse_numel(int argc, char** argv) {
  int64_t numel = 1 << 20;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--numel" && i + 1 < argc) {
      numel = std::atoll(argv[++i]);
    } else {
      ZT_THROW("unknown argument '", a, "' (usage: zt_allreduce_smoke [--numel N])");
    }
  }
  ZT_CHECK(numel > 0, "--numel must be positive, got ", numel);
  return numel;
}

int run(int argc, char** argv) {
  const int64_t numel = parse_numel(argc, argv);
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  zt::set_process_rank(rank);

  torch::Tensor t = torch::full({numel}, static_cast<float>(rank + 1));
  MPI_Allreduce(MPI_IN_PLACE, t.data_ptr<float>(), static_cast<int>(numel), MPI_FLOAT, MPI_SUM,
                MPI_COMM_WORLD);
  const float expected = size * (size + 1) / 2.0f;
  const float max_err = (t - expected).abs().max().item<float>();
  int ok = max_err == 0.0f ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  ZT_LOG_INFO("all_reduce of ", numel, " floats over ", size,
              " ranks: every element = ", t[0].item<float>(), " (expected ", expected,
              "), max error ", max_err, ", ", all_ok ? "OK on all ranks" : "MISMATCH");
  MPI_Finalize();
  ZT_CHECK(all_ok == 1, "all_reduce result mismatch: max error ", max_err, " on this rank");
  if (rank == 0) std::printf("zt_allreduce_smoke: OK (%d ranks, sum %.0f)\n", size, expected);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_main("zt_allreduce_smoke", [&] { return run(argc, argv); });
}
