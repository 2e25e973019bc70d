#pragma once
// --transport mpi: this node's ranks start through OpenMPI's own runtime, so that MPI_Init
// succeeds in them and `communication.backend: auto` resolves to mpi on CPU (on these machines
// MPI's collectives run 5-20x faster than c10d gloo's; docs/DESIGN.md, Launch paths).
//
//   ztrun ─ mpirun -q --bind-to none --oversubscribe -np N ─┬─ ztrun --mpi-rank PROGRAM ARGS ─
//   PROGRAM (rank 0) (Supervisor: one child, output    (OpenMPI's runtime:   └─ ztrun --mpi-rank
//   PROGRAM ARGS ─ PROGRAM (rank 1)
//    relayed as it is)                 aborts the job when     (rank shim: a Supervisor of one
//                                      a process fails)         child, as a native ztrun's rank)
//
// The rank shim is ztrun itself in a hidden mode. It reads OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,
// LOCAL_SIZE}, gives its one child the same environment a native launch gives (rank_env.h, with
// OpenMPI's variables kept: MPI_Init needs them), relays its output as `[rank] line` and into
// <log_dir>/rank_<rank>.log, forwards the signals mpirun sends, and exits with the child's code
// (128 + signal when killed). A child that fails on its own is recorded (first writer wins, by
// O_EXCL) in a file the launching ztrun reads, so that ztrun's one-line error names the rank as
// a native launch's does; mpirun's own banners are silenced by -q.
//
// What a native launch gives is kept: the rank environment (plus OpenMPI's), --max-restarts (the
// whole mpirun job runs again, ZT_RESTART_COUNT counts), a failed rank stops the others at once
// (mpirun aborts the job when a process exits non-zero; MPI_Abort from base/fatal_exit.h
// does the same), exit codes (0, 1 after a failure, 128 + signal when ztrun was told to stop),
// SIGINT/SIGTERM/SIGHUP forwarded (ztrun -> mpirun's group -> shims -> ranks), and nothing
// outlives ztrun (PR_SET_PDEATHSIG at every level). Single node only; OpenMPI 4.1's flags.
//
// --bind-cores-to-rank: OpenMPI binds the ranks itself, from a rankfile in ztrun's temporary
// directory (`rank <local rank>=localhost slot=<cores>`, physical CPU numbers by
// rmaps_rank_file_physical, and --use-hwthread-cpus so that a slot is that hardware thread, not
// the whole core around it) instead of --bind-to none; the shims and their ranks inherit the
// binding. OMP_NUM_THREADS is passed with -x, and with several NUMA nodes
// hwloc_base_mem_alloc_policy local_only keeps each rank's memory on its cores' node.

#include <string>
#include <vector>

#include "launcher/core_binding.h"
#include "launcher/local_launch.h"
#include "launcher/options.h"

namespace zt::launcher {

// argv[1] of a ztrun started by mpirun as a rank shim.
inline constexpr const char* kMpiRankFlag = "--mpi-rank";

// The launch after `auto` is resolved: transport kNative or kMpi, and for kMpi the mpirun to run.
struct TransportChoice {
  Transport transport = Transport::kNative;
  std::string mpirun;  // absolute path, for kMpi
  std::string reason;  // why auto chose kNative ("" otherwise)
};

// OpenMPI's launcher: `requested` (--mpirun, a path or a name searched in PATH), else mpirun on
// PATH, else the one found when zerotorch was configured. Returns "" when none is found or the
// one found is not OpenMPI's (its --version does not say "Open MPI"); `why` then says what
// was tried.
std::string find_openmpi_launcher(const std::string& requested, std::string* why);

// kAuto becomes kMpi for a single-node launch on a machine without an NVIDIA GPU when OpenMPI's
// launcher is found, else kNative with the reason. kMpi without a launcher is an error naming
// what was tried.
TransportChoice resolve_transport(const LaunchOptions& options);

// mpirun's command line for one attempt: `self` is this ztrun's own executable, `rankfile` where
// rankfile_text(node.cores) is (used only when node.cores is not empty).
std::vector<std::string> mpirun_argv(const LaunchOptions& options, const NodeSetup& node,
                                     const std::string& mpirun, const std::string& self,
                                     const std::string& rankfile, bool as_root);

// OpenMPI's rankfile for a core binding plan: one `rank R=localhost slot=LIST` line per rank.
std::string rankfile_text(const std::vector<RankCores>& plan);

// The whole local launch through mpirun; returns ztrun's exit code as launch_local() does.
// `options` must have master_addr and master_port resolved.
int launch_mpi(const LaunchOptions& options, const std::string& mpirun);

// The rank shim (argv after kMpiRankFlag: PROGRAM ARGS...); returns its exit code.
int run_mpi_rank(const std::vector<std::string>& program_and_args);

}  // namespace zt::launcher
