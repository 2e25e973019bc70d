#pragma once
// zt::dist::Topology: the process groups one training job runs over, computed once from the
// communicator of every rank, the launch environment and what the job asks for. The training
// setup (train/initialize.cpp: partitioned construction) and the engine (core/engine.cpp) use
// the same object; it is where tensor, sequence and expert parallel groups join.
//
// clang-format off
//   group         ranks                                              made when
//   all           every rank                                         always
//   world         the ranks ZeRO runs over: every rank, or with      always
//                 tensor (expert) parallelism those of this rank's
//                 tensor (expert) index: ranks r with the same r % tp
//                 (r % ep), DeepSpeed's expert-data-parallel group
//   shard         the ranks the ZeRO state is sharded over: groups   always (world itself
//                 of shard_size consecutive ranks (groups.h)          without hybrid sharding)
//   replica       this rank's position in every shard group          hybrid sharding (MiCS)
//   hpz           hpz consecutive ranks of the shard group           ZeRO++ hpZ
//   reduce_nodes  the shard group's node groups for the two-level    qgZ, or the hierarchical
//                 gradient reductions                                 reduction
//   gather_nodes  the shard group's node groups for MiCS's           mics_hierarchical_params_gather
//                 hierarchical parameter gather
//   sequence      sequence_parallel_size consecutive ranks of        sequence_parallel_size > 1
//                 `world`, which hold one batch's sequence split in
//                 order (parallel/sequence_exchange.h)
//   tensor        tensor_parallel_size consecutive ranks of `all`,   tensor_parallel_size > 1
//                 which hold slices of the same layers
//                 (parallel/tensor_parallel.h)
//   expert        expert_parallel_size consecutive ranks of `all`,   expert_parallel_size > 1
//                 which hold different experts of the same layers
//                 and trade tokens (parallel/expert_exchange.h)
//   batch         the ranks whose micro-batches make up one step's   always (world, or all
//                 tokens, each once: where token counts and losses    under expert
//                 are summed                                          parallelism)
// clang-format on
//
// The mesh: rank = ((data index * sp) + sequence index) * tp + tensor index. Tensor groups are
// innermost (AutoTP's, within a node when tp divides the node's ranks); each tensor index is a
// ZeRO world of its own, since its ranks hold the same slices (DeepSpeed's data-parallel group
// under AutoTP).
//
// Sequence parallelism and ZeRO (DeepSpeed's Ulysses layout, its seq_data_parallel group): the
// ranks of a sequence group train one batch, so the data-parallel degree is world / sp and the
// rank's data-parallel index is its world rank / sp; ZeRO still shards over the whole world (data
// x sequence), since every rank holds every parameter's gradient.
//
// Expert parallelism (DeepSpeed's AutoEP layout: expert groups of consecutive ranks, the
// expert-data-parallel groups striding across them) borrows its ranks from the data dimension:
// every rank reads its own batches, as without it. The experts of a layer are split over the
// expert group as a tensor split is over the tensor group (`split()`: the group whose ranks hold
// different slices of some parameters, the engine's tensor_split_params), so each expert index is
// a ZeRO world of its own; unlike a tensor split, the replicated parameters see different tokens
// on each rank of the expert group, and the engine sums their gradients over it as well
// (core/zero/sharded_step.h). Not with tensor or sequence parallelism, nor with hybrid sharding
// or hpZ (one line each says so).
//
// A group that would not help is not made, and a log line says why once: node groups need ranks
// numbered node by node on several nodes; an hpZ group as large as the shard group is the shard
// group itself.

#include <memory>

#include "parallel/communicator.h"
#include "parallel/env.h"
#include "parallel/groups.h"

namespace zt::dist {

struct TopologyOptions {
  // Hybrid sharding: the state is sharded over groups of this many consecutive ranks and
  // replicated across them (MiCS's mics_shard_size); 0: sharded over every rank.
  int shard_size = 0;
  // ZeRO++ hpZ: the secondary partition's group size (zero_hpz_partition_size); 1: none.
  int hpz = 1;
  // Node groups for ZeRO++ qgZ's quantized all-to-alls.
  bool quantized_reduce = false;
  // Node groups for the hierarchical reduction: kAuto makes them except over NCCL, which
  // already picks topology-aware rings and trees across nodes.
  enum class TwoLevel { kOff, kOn, kAuto };
  TwoLevel hierarchical_reduce = TwoLevel::kOff;
  // Node groups of a shard group spanning nodes, for MiCS's hierarchical gather.
  bool hierarchical_gather = false;
  // qwZ: quantized gathers stay one all-gather (no gather_nodes).
  bool quantized_weights = false;
  // Ulysses sequence parallelism (the config's sequence_parallel_size): ranks per sequence group.
  int sequence_parallel_size = 1;
  // Tensor parallelism (tensor_parallel.autotp_size): ranks per tensor group.
  int tensor_parallel_size = 1;
  // Expert parallelism (expert_parallel.autoep_size): ranks per expert group.
  int expert_parallel_size = 1;
};

struct Topology {
  // world: the ranks ZeRO runs over (every rank without tensor parallelism).
  std::shared_ptr<Communicator> all, world, shard, replica, hpz;
  std::shared_ptr<NodeGroups> reduce_nodes, gather_nodes;
  std::shared_ptr<Communicator> sequence;  // null without sequence parallelism
  std::shared_ptr<Communicator> tensor;    // null without tensor parallelism
  std::shared_ptr<Communicator> expert;    // null without expert parallelism
  std::shared_ptr<Communicator> batch;     // world, or all under expert parallelism
  int sequence_parallel_size() const { return sequence ? sequence->size() : 1; }
  int tensor_parallel_size() const { return tensor ? tensor->size() : 1; }
  int expert_parallel_size() const { return expert ? expert->size() : 1; }
  // The group over which some parameters are split (tensor or expert; at most one exists), and
  // this rank's index in it; null and 0 without either.
  const std::shared_ptr<Communicator>& split() const { return tensor ? tensor : expert; }
  int split_size() const { return split() ? split()->size() : 1; }
  int split_index() const { return split() ? split()->rank() : 0; }
  // Data-parallel degree and this rank's index in it: which batches this rank's group reads.
  // Ranks are numbered ((data * sp) + sequence) * tp + tensor; expert groups take theirs from
  // the data dimension.
  int data_parallel_size() const {
    return all->size() / (sequence_parallel_size() * tensor_parallel_size());
  }
  int data_parallel_rank() const {
    return all->rank() / (sequence_parallel_size() * tensor_parallel_size());
  }
};

// Collective over `world` (every rank): every rank calls it with the same options.
std::shared_ptr<const Topology> make_topology(std::shared_ptr<Communicator> world,
                                              const TopologyOptions& options, const Env& env);

}  // namespace zt::dist
