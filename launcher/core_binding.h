#pragma once
// --bind-cores-to-rank: the CPUs each local rank runs on and the NUMA node(s) its memory comes
// from, by the rules of DeepSpeed's launcher (deepspeed/launcher/launch.py runs each rank under
// the `numactl` command that deepspeed/utils/numa.py get_numactl_cmd builds):
//
//   cores    --bind-core-list when given (DeepSpeed's syntax: `1,3-5,7`, items ascending and not
//            overlapping), else every CPU ztrun may run on (its own affinity mask, so a `taskset`
//            or cpuset around ztrun is honoured), one hardware thread per physical core (DeepSpeed
//            counts physical cores), NUMA node by NUMA node.
//   split    cores_per_rank = cores / local ranks, rounded down (the rest stay idle); local rank i
//            gets entries [i * cores_per_rank, (i + 1) * cores_per_rank) of that list. Fewer cores
//            than local ranks is an error.
//   memory   only with several NUMA nodes: a rank whose cores all lie in one node's CPUs allocates
//            from that node alone (numactl -m; MPOL_BIND here). Nodes with identical CPU lists
//            (fake NUMA) are bound together. A rank across nodes gets no memory policy.
//   threads  OMP_NUM_THREADS = cores_per_rank (apply_binding_environment()).
//
// Where ztrun differs: the default list is the affinity mask, not CPUs 0..P-1 whatever the mask
// says; it is ordered by NUMA node, so interleaved numbering (node 0 = the even CPUs) still gives
// node-local blocks; nodes without CPUs (DeepSpeed's flat-HBM mode prefers them) are left out.
//
// Two transports apply a plan: the native launch calls sched_setaffinity and set_mempolicy in each
// rank's child before exec (BindingMasks, through ChildSpec); --transport mpi gives OpenMPI a
// rankfile (mpi_launch.h). Both need no libnuma.

#include <string>
#include <vector>

#include "launcher/rank_env.h"

namespace zt::launcher {

// What planning needs to know of the machine. Every number is a Linux CPU (or node) number.
struct CpuLayout {
  std::vector<int> allowed;       // ztrun's affinity mask, ascending
  std::vector<int> one_per_core;  // `allowed` less every hardware thread but the first of its core
  // numa_nodes[n]: the CPUs of NUMA node n, ascending; empty for a node without CPUs (or none n).
  // Empty when the machine says nothing of NUMA (no /sys/devices/system/node).
  std::vector<std::vector<int>> numa_nodes;
};

struct RankCores {
  std::vector<int> cpus;          // ascending; sched_setaffinity, or a rankfile's slot list
  std::vector<int> memory_nodes;  // MPOL_BIND to these nodes; empty: the memory policy is left
};

// DeepSpeed's range list: comma-separated items, each a CPU or an inclusive range `a-b` with
// a <= b, in ascending order without overlaps, no spaces. Throws zt::Error naming `what` (the flag
// or file) and the bad item; an empty list is an error unless `allow_empty` (sysfs files of nodes
// without CPUs).
std::vector<int> parse_core_list(const std::string& text, const std::string& what,
                                 bool allow_empty = false);

// The shortest form of an ascending list: {0, 1, 2, 5} -> "0-2,5".
std::string format_core_list(const std::vector<int>& cpus);

// The plan, one entry per local rank; pure. `core_list` is --bind-core-list ("" for the default).
// Throws zt::Error naming the flag when a listed core is outside `layout.allowed` or there are
// fewer cores than local ranks.
std::vector<RankCores> plan_core_binding(const CpuLayout& layout, const std::string& core_list,
                                         int local_ranks);

// This machine, for this process: sched_getaffinity, /sys/devices/system/cpu/cpu*/topology/
// thread_siblings_list and /sys/devices/system/node/node*/cpulist.
CpuLayout read_cpu_layout();

// "" when this process may set every memory policy of `plan`, else why not (the errno text).
// Tried in a short-lived child, so ztrun's own policy is untouched: under Docker's default seccomp
// profile without CAP_SYS_NICE set_mempolicy fails with EPERM, and DeepSpeed then binds cores only.
std::string memory_policy_error(const std::vector<RankCores>& plan);

// OMP_NUM_THREADS = cores_per_rank in the ranks' shared environment `env`, over a value from
// ztrun's environment or a .ztrun_env file (DeepSpeed sets it whatever the environment says) but
// not over one given with --env (`env_flags`), which is this command's own. KMP_AFFINITY in `env`
// is an error, as in DeepSpeed: Intel's OpenMP would re-pin the threads by it. Returns a note for
// the log when an inherited value was replaced ("" otherwise).
std::string apply_binding_environment(EnvMap* env, const std::vector<std::string>& env_flags,
                                      int cores_per_rank);

// "local rank 0: cores 0-3 (NUMA node 0), local rank 1: cores 4-7 (NUMA node 1)".
std::string describe_plan(const std::vector<RankCores>& plan);

// A RankCores as the system calls take it, built before fork(): between fork() and exec() the
// child may only make async-signal-safe calls, and the two calls below are plain system calls.
class BindingMasks {
 public:
  BindingMasks() = default;  // binds nothing
  explicit BindingMasks(const RankCores& cores);

  // sched_setaffinity(0, ...) when there are cpus; 0 or the errno.
  int apply_affinity() const;
  // set_mempolicy(MPOL_BIND, ...) when there are memory nodes; 0 or the errno.
  int apply_memory_policy() const;

 private:
  std::vector<unsigned long> cpus_;   // bit c of word c / bits: CPU c
  std::vector<unsigned long> nodes_;  // bit n: node n, with one spare bit (set_mempolicy's maxnode)
};

}  // namespace zt::launcher
