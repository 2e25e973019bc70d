#pragma once
// Sub-communicators derived from the world: a partition of the ranks into groups, the node layout
// (one group per node, one across nodes per local rank), and the 2-D layout hybrid sharding uses
// (docs/DESIGN.md, Hybrid sharding).
//
// Every function here is collective over `world`: every rank calls it, in the same order relative
// to the world's other collectives, with the same arguments.
//
// Layouts (8 ranks, 2 nodes of 4; hybrid groups of 4):
//   node groups     intra {0 1 2 3} {4 5 6 7}        inter {0 4} {1 5} {2 6} {3 7}
//   hybrid groups   shard {0 1 2 3} {4 5 6 7}        replica {0 4} {1 5} {2 6} {3 7}
// Hybrid shard groups are consecutive ranks (DeepSpeed's MiCS `create_mics_comm_groups`, PyTorch's
// HSDP device mesh (replicate, shard)): with ranks numbered node by node, a shard group of the
// node's size stays inside one node and only the replica all-reduce crosses the network.

#include <memory>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/env.h"

namespace zt::dist {

// Every rank passes the same groups (disjoint, covering every rank of `world`, each listed in
// the order of its new ranks); returns the communicator of the group holding this rank. A group
// of one rank is a communicator of size 1 on the same backend.
std::shared_ptr<Communicator> split_partition(Communicator& world,
                                              const std::vector<std::vector<int>>& groups);

// Which node each rank of `world` runs on, and its place there.
struct NodeLayout {
  std::vector<int> node_of_rank;        // world rank -> node index (0 .. nodes - 1)
  std::vector<std::vector<int>> ranks;  // node -> its world ranks, by local rank
  int nodes() const { return static_cast<int>(ranks.size()); }
  // Every node has the same number of ranks.
  bool uniform() const;
  // Several nodes, as many ranks on each, and ranks numbered node by node (rank = node * L +
  // local index): the layout the two-level collectives need (core/zero/hierarchical_reduce.h,
  // core/zero/quantized_reduce.h), so that a rank's chunk of a flat buffer can be reached in
  // the node first and across nodes second.
  bool node_major() const;
};

// The node of this rank: the launcher's node rank where it gives one (ztrun/torchrun's
// GROUP_RANK, Slurm's SLURM_NODEID), else ranks numbered node by node (OpenMPI's default by-slot
// mapping: node = rank / local world size, checked against the local rank). Exchanged over
// `world` (one all_gather) so every rank knows every rank's node; a layout that contradicts
// itself (two ranks with the same node and local rank) is a zt::Error naming the variables.
NodeLayout discover_node_layout(Communicator& world, const Env& env);

struct NodeGroups {
  std::shared_ptr<Communicator> intra;  // this node's ranks
  std::shared_ptr<Communicator> inter;  // the ranks with this rank's local rank, one per node
};
NodeGroups make_node_groups(Communicator& world, const NodeLayout& layout);

struct HybridGroups {
  int shard_size = 1;
  std::shared_ptr<Communicator> shard;  // shard_size consecutive ranks: state sharded here
  // world / shard_size ranks at this rank's position; null when shard_size == world size.
  std::shared_ptr<Communicator> replica;
};
// shard_size must divide world.size() (else a zt::Error naming `key`, the config key that asked
// for it). shard_size == world.size() gives shard = world and no replica group.
HybridGroups make_hybrid_groups(std::shared_ptr<Communicator> world, int shard_size,
                                const char* key);

}  // namespace zt::dist
