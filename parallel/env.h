#pragma once
// zt::dist::Env: who this process is in the job, read once from the launcher's environment
// (docs/DESIGN.md, Launch environment). Every launch path yields the same facts.
//
// Sources, in order of precedence (the first family present wins):
//   torchrun / ztrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE    -> launcher "torchrun"
//   OpenMPI (mpirun): OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE} -> launcher "mpi"
//   Slurm (srun):     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, and the step's layout:
//                     SLURM_STEP_TASKS_PER_NODE ("2(x2)") at SLURM_NODEID, SLURM_STEP_NODELIST
//                     ("node[01-02]"), parsed by slurm_lists.h; without the step's list,
//                     SLURM_NTASKS_PER_NODE's leading count             -> launcher "slurm"
//   none of them:     one rank (rank 0 of 1)                            -> launcher "none"
// torchrun's and OpenMPI's names together (ztrun --transport mpi, whose ranks mpirun starts) are
// read as torchrun's but give launcher "mpi": OpenMPI's runtime is there, MPI_Init works.
// MASTER_ADDR / MASTER_PORT are read whatever the family (both or neither). A multi-node Slurm
// step without them rendezvouses at its first node, port 29500 (torchrun's default).
//
// Errors (zt::Error, kind kUser, naming the variables):
//  - a partial family: RANK without WORLD_SIZE, LOCAL_RANK without LOCAL_WORLD_SIZE, ...;
//  - values that are not integers, out of range (rank >= world size, local rank >= local world
//    size, local world size > world size), MASTER_PORT outside 1..65535;
//  - torchrun and OpenMPI variables both present but disagreeing on rank or world size (one
//    process cannot be two ranks; unset one family).
// A family without its LOCAL_* pair is taken as one node (local = global).

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace zt::dist {

inline constexpr int kDefaultSlurmMasterPort = 29500;

struct Env {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;        // empty when MASTER_ADDR is unset
  int master_port = 0;            // 0 when MASTER_PORT is unset
  std::string launcher = "none";  // "torchrun" | "mpi" | "slurm" | "none"
  // Slurm steps (SLURM_STEP_TASKS_PER_NODE, SLURM_NODEID, SLURM_STEP_NODELIST) and torchrun /
  // ztrun (GROUP_RANK; nodes = ceil(WORLD_SIZE / LOCAL_WORLD_SIZE), no names); elsewhere one node
  // (groups.h then infers nodes from the local ranks).
  int node_rank = 0;
  int num_nodes = 1;
  std::vector<std::string> nodes;

  bool has_master() const { return !master_addr.empty() && master_port > 0; }

  // From the process environment; also calls zt::set_process_rank(rank).
  static Env discover();
  // Same rules over an explicit variable lookup (nullptr = unset); does not touch the process
  // rank. Tests use it with a map.
  static Env from_lookup(const std::function<const char*(const char*)>& lookup);
  static Env from_map(const std::map<std::string, std::string>& vars);

  // "rank 1/4 (local 1/2) via mpi, master 10.0.0.1:29500"
  std::string describe() const;
};

// The CUDA device index a rank uses, given how many devices it sees (nccl_communicator.h makes
// it the rank's current device):
//  - local_world_size <= device_count: device local_rank, one GPU per rank of the node (torchrun's
//    LOCAL_RANK convention);
//  - device_count == 1: device 0 (the launcher gives each rank only its own GPU, e.g.
//    CUDA_VISIBLE_DEVICES per rank, srun --gpus-per-task=1);
//  - otherwise some ranks of the node would share a GPU, which NCCL does not support within one
//    communicator: a zt::Error naming the counts. So does device_count < 1.
int cuda_device_for_rank(const Env& env, int device_count);

}  // namespace zt::dist
