#include "parallel/env.h"

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <vector>

#include "base/env_vars.h"
#include "base/error.h"
#include "parallel/slurm_lists.h"

namespace zt::dist {
namespace {

using Lookup = std::function<const char*(const char*)>;

// A present variable must be a whole decimal integer; a typo must not silently read as 0.
std::optional<long> read_int(const Lookup& lookup, const char* name) {
  const char* v = lookup(name);
  if (v == nullptr) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  ZT_CHECK(*v != '\0' && end != nullptr && *end == '\0' && errno == 0, "environment variable ",
           name, " must be an integer, got '", v, "'");
  return x;
}

// SLURM_NTASKS_PER_NODE (set only with --ntasks-per-node) reads "4" or "4(x2)": the leading
// count is the count of every node.
std::optional<long> read_slurm_count(const Lookup& lookup, const char* name) {
  const char* v = lookup(name);
  if (v == nullptr) return std::nullopt;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  ZT_CHECK(end != v && (*end == '\0' || *end == '(' || *end == ','), "environment variable ", name,
           " must start with an integer, got '", v, "'");
  return x;
}

// One family's four variables, checked for completeness and range.
struct Family {
  const char* rank_var;
  const char* size_var;
  const char* local_rank_var;
  const char* local_size_var;
  std::optional<long> rank, size, local_rank, local_size;

  bool present() const { return rank || size || local_rank || local_size; }

  void check(const char* family) const {
    ZT_CHECK(rank.has_value() == size.has_value(), family,
             " launch variables are partial: ", rank ? rank_var : size_var, " is set but ",
             rank ? size_var : rank_var, " is not");
    ZT_CHECK(rank.has_value() || !local_rank.has_value(), family,
             " launch variables are partial: ", local_rank_var, " is set but ", rank_var,
             " is not");
    ZT_CHECK(local_rank.has_value() == local_size.has_value(), family,
             " launch variables are partial: ", local_rank ? local_rank_var : local_size_var,
             " is set but ", local_rank ? local_size_var : local_rank_var, " is not");
    ZT_CHECK(*size >= 1, size_var, " must be >= 1, got ", *size);
    ZT_CHECK(*rank >= 0 && *rank < *size, rank_var, "=", *rank, " is outside 0..", size_var, "-1 (",
             size_var, "=", *size, ")");
    if (local_rank) {
      ZT_CHECK(*local_size >= 1 && *local_size <= *size, local_size_var, "=", *local_size,
               " must be in 1..", size_var, " (", *size, ")");
      ZT_CHECK(*local_rank >= 0 && *local_rank < *local_size, local_rank_var, "=", *local_rank,
               " is outside 0..", local_size_var, "-1 (", local_size_var, "=", *local_size, ")");
    }
  }

  void fill(Env& env, const char* launcher) const {
    env.rank = static_cast<int>(*rank);
    env.world_size = static_cast<int>(*size);
    env.local_rank = static_cast<int>(local_rank ? *local_rank : *rank);
    env.local_world_size = static_cast<int>(local_size ? *local_size : *size);
    env.launcher = launcher;
  }
};

Family read_family(const Lookup& lookup, const char* r, const char* s, const char* lr,
                   const char* ls, bool slurm_counts = false) {
  Family f{r, s, lr, ls, {}, {}, {}, {}};
  f.rank = read_int(lookup, r);
  f.size = read_int(lookup, s);
  f.local_rank = read_int(lookup, lr);
  f.local_size = slurm_counts ? read_slurm_count(lookup, ls) : read_int(lookup, ls);
  return f;
}

// The node's place in a Slurm step (slurm_lists.h): its task count from
// SLURM_STEP_TASKS_PER_NODE at SLURM_NODEID (without SLURM_NODEID: the node holding
// SLURM_PROCID in Slurm's default block distribution), the hosts from SLURM_STEP_NODELIST.
// Without SLURM_STEP_TASKS_PER_NODE, SLURM_NTASKS_PER_NODE's leading count (older behaviour).
void read_slurm_step(const Lookup& lookup, Family& f, Env& env) {
  const char* step_tasks = lookup(env::kSlurmStepTasksPerNode);
  if (step_tasks == nullptr) {
    if (f.local_rank) f.local_size = read_slurm_count(lookup, env::kSlurmNTasksPerNode);
    if (!f.local_size) f.local_size_var = env::kSlurmStepTasksPerNode;
    return;
  }
  f.local_size_var = env::kSlurmStepTasksPerNode;
  const std::vector<int> tasks =
      parse_slurm_tasks_per_node(step_tasks, env::kSlurmStepTasksPerNode);
  long total = 0;
  for (int t : tasks) total += t;
  ZT_CHECK(!f.size || *f.size == total, env::kSlurmStepTasksPerNode, "='", step_tasks, "' counts ",
           total, " tasks but ", f.size_var, "=", *f.size);
  std::optional<long> node = read_int(lookup, env::kSlurmNodeId);
  if (!node) {
    long first = 0;
    node = 0;
    while (*node + 1 < static_cast<long>(tasks.size()) && *f.rank >= first + tasks[*node])
      first += tasks[(*node)++];
  }
  ZT_CHECK(*node >= 0 && *node < static_cast<long>(tasks.size()), env::kSlurmNodeId, "=", *node,
           " but ", env::kSlurmStepTasksPerNode, "='", step_tasks, "' lists ", tasks.size(),
           " node(s)");
  if (f.local_rank) f.local_size = tasks[*node];
  env.node_rank = static_cast<int>(*node);
  env.num_nodes = static_cast<int>(tasks.size());
  if (const char* list = lookup(env::kSlurmStepNodeList)) {
    env.nodes = expand_slurm_hostlist(list, env::kSlurmStepNodeList);
    ZT_CHECK(env.nodes.size() == tasks.size(), env::kSlurmStepNodeList, "='", list, "' names ",
             env.nodes.size(), " node(s) but ", env::kSlurmStepTasksPerNode, "='", step_tasks,
             "' lists ", tasks.size());
  }
}

// torchrun's and ztrun's node rank: GROUP_RANK, with nodes of LOCAL_WORLD_SIZE ranks each.
void read_group_rank(const Lookup& lookup, Env& env) {
  std::optional<long> group = read_int(lookup, env::kGroupRank);
  if (!group) return;
  const int nodes = (env.world_size + env.local_world_size - 1) / env.local_world_size;
  ZT_CHECK(*group >= 0 && *group < nodes, env::kGroupRank, "=", *group, " is outside 0..",
           nodes - 1, " (", env::kWorldSize, "=", env.world_size, ", ", env::kLocalWorldSize, "=",
           env.local_world_size, ")");
  env.node_rank = static_cast<int>(*group);
  env.num_nodes = nodes;
}

}  // namespace

Env Env::from_lookup(const Lookup& lookup) {
  Family torchrun =
      read_family(lookup, env::kRank, env::kWorldSize, env::kLocalRank, env::kLocalWorldSize);
  Family ompi =
      read_family(lookup, env::kOmpiRank, env::kOmpiSize, env::kOmpiLocalRank, env::kOmpiLocalSize);
  Family slurm = read_family(lookup, env::kSlurmProcId, env::kSlurmNTasks, env::kSlurmLocalId,
                             env::kSlurmNTasksPerNode, /*slurm_counts=*/true);
  slurm.local_size.reset();  // read_slurm_step decides it
  // Slurm exports SLURM_NTASKS (and SLURM_NTASKS_PER_NODE) for the whole allocation, also in an
  // salloc shell where no task rank exists: the family counts only once SLURM_PROCID is set, and
  // the local pair only when SLURM_LOCALID is.
  if (!slurm.rank)
    slurm = Family{
        slurm.rank_var, slurm.size_var, slurm.local_rank_var, slurm.local_size_var, {}, {}, {}, {}};

  Env env;
  if (torchrun.present()) {
    torchrun.check("torchrun");
    torchrun.fill(env, "torchrun");
    read_group_rank(lookup, env);
    if (ompi.present()) {
      ompi.check("OpenMPI");
      ZT_CHECK(*ompi.rank == *torchrun.rank && *ompi.size == *torchrun.size,
               "contradictory launch variables: RANK=", *torchrun.rank,
               " WORLD_SIZE=", *torchrun.size, " but OMPI_COMM_WORLD_RANK=", *ompi.rank,
               " OMPI_COMM_WORLD_SIZE=", *ompi.size, " (unset one family)");
      // Both agree: OpenMPI's runtime started this process (ztrun --transport mpi adds
      // torchrun's names on top), so MPI_Init works and the mpi backend may be chosen.
      env.launcher = "mpi";
    }
  } else if (ompi.present()) {
    ompi.check("OpenMPI");
    ompi.fill(env, "mpi");
  } else if (slurm.present()) {
    if (slurm.rank) read_slurm_step(lookup, slurm, env);
    slurm.check("Slurm");
    slurm.fill(env, "slurm");
  }

  const char* addr = lookup(env::kMasterAddr);
  std::optional<long> port = read_int(lookup, env::kMasterPort);
  ZT_CHECK((addr != nullptr) == port.has_value(),
           "launch variables are partial: ", addr ? env::kMasterAddr : env::kMasterPort,
           " is set but ", addr ? env::kMasterPort : env::kMasterAddr, " is not");
  if (addr != nullptr) {
    ZT_CHECK(*addr != '\0', env::kMasterAddr, " is set but empty");
    ZT_CHECK(*port >= 1 && *port <= 65535, env::kMasterPort, " must be in 1..65535, got ", *port);
    env.master_addr = addr;
    env.master_port = static_cast<int>(*port);
  } else if (env.launcher == "slurm" && env.num_nodes > 1 && !env.nodes.empty()) {
    // A multi-node srun step without MASTER_ADDR: the step's first node and torchrun's default
    // port, as sbatch scripts usually set them by hand.
    env.master_addr = env.nodes.front();
    env.master_port = kDefaultSlurmMasterPort;
  }
  return env;
}

Env Env::from_map(const std::map<std::string, std::string>& vars) {
  return from_lookup([&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

Env Env::discover() {
  Env env = from_lookup(::zt::env::get);
  set_process_rank(env.rank);
  return env;
}

std::string Env::describe() const {
  std::string s = detail::str("rank ", rank, "/", world_size, " (local ", local_rank, "/",
                              local_world_size, ") via ", launcher);
  if (has_master()) s += detail::str(", master ", master_addr, ":", master_port);
  return s;
}

int cuda_device_for_rank(const Env& env, int device_count) {
  ZT_CHECK(device_count >= 1, "the nccl backend needs a CUDA device, but ", env.describe(),
           " sees none");
  if (env.local_world_size <= device_count) return env.local_rank;
  if (device_count == 1) return 0;
  ZT_THROW(env.local_world_size, " ranks on this node (local world size) but ", device_count,
           " CUDA devices visible to local rank ", env.local_rank,
           ": ranks would share GPUs; start at most one rank per GPU, or give each rank one GPU "
           "(CUDA_VISIBLE_DEVICES)");
}

}  // namespace zt::dist
