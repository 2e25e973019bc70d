#include "parallel/topology.h"

#include <vector>

#include "base/error.h"
#include "base/logging.h"

namespace zt::dist {
namespace {

// The node groups of the shard group for the two-level gradient reductions: ZeRO++ qgZ
// (core/zero/quantized_reduce.h) and the hierarchical reduction (core/zero/hierarchical_reduce.h).
// Null where neither applies or the layout does not allow it (one node, ranks not numbered node
// by node): the gradients then reduce flat over every rank.
std::shared_ptr<NodeGroups> reduce_node_groups(const TopologyOptions& o, Communicator& shard,
                                               bool hybrid, const Env& env) {
  const bool qgz = o.quantized_reduce;
  bool hierarchical = false;
  if (shard.size() > 1) {
    using T = TopologyOptions::TwoLevel;
    hierarchical = o.hierarchical_reduce == T::kOn ||
                   (o.hierarchical_reduce == T::kAuto && shard.backend() != "nccl");
  }
  if (!qgz && !hierarchical) return nullptr;
  const char* what =
      qgz ? "zero_optimization.zero_quantized_gradients" : "the hierarchical gradient reduction";
  if (qgz && hybrid) {
    ZT_LOG_WARN(
        "zero_optimization.zero_quantized_gradients with mics_shard_size: the gradients "
        "reduce-scatter unquantized in the shard group");
    return nullptr;
  }
  const bool same_ranks = env.rank == shard.rank() && env.world_size == shard.size();
  // Collective: every rank takes the same branch (the same environment kind everywhere).
  const NodeLayout layout = same_ranks ? discover_node_layout(shard, env) : NodeLayout{};
  const int local = layout.nodes() > 0 ? static_cast<int>(layout.ranks.front().size()) : 0;
  if (!layout.node_major() || (!qgz && local < 2)) {
    // One rank per node: the flat ring already crosses each link once per step.
    if (qgz && shard.rank() == 0) {
      ZT_LOG_INFO(what, ": ", layout.nodes() < 2 ? "one node" : "ranks not numbered node by node",
                  ", so the gradients reduce-scatter unquantized (as DeepSpeed does on one node)");
    }
    return nullptr;
  }
  auto groups = std::make_shared<NodeGroups>(make_node_groups(shard, layout));
  if (shard.rank() == 0) {
    ZT_LOG_INFO(what, ": ", qgz ? "int8 all-to-alls" : "reductions in the node, then across",
                " in ", layout.nodes(), " nodes of ", groups->intra->size(), " ranks");
  }
  return groups;
}

// MiCS's mics_hierarchical_params_gather: the node groups of this rank's shard group when the
// group spans several nodes (numbered node by node, as many ranks on each); else null, and a
// shard group gathers with one all-gather. Collective over `world`, then over `shard`.
std::shared_ptr<NodeGroups> gather_node_groups(const TopologyOptions& o, Communicator& world,
                                               Communicator& shard, const Env& env) {
  const char* key = "zero_optimization.mics_hierarchical_params_gather";
  if (o.quantized_weights) {
    if (world.rank() == 0) {
      ZT_LOG_INFO(key, ": qwZ's quantized gathers stay one all-gather in the shard group");
    }
    return nullptr;
  }
  const bool same_ranks = env.rank == world.rank() && env.world_size == world.size();
  const NodeLayout layout = same_ranks ? discover_node_layout(world, env) : NodeLayout{};
  // The shard group is world ranks [first, first + size) (groups.h); its own layout numbers the
  // nodes it touches in order.
  NodeLayout group;
  if (same_ranks) {
    const int first = world.rank() - shard.rank();
    std::vector<int> index(static_cast<size_t>(layout.nodes()), -1);
    for (int i = 0; i < shard.size(); ++i) {
      int& b = index[static_cast<size_t>(layout.node_of_rank[static_cast<size_t>(first + i)])];
      if (b < 0) {
        b = group.nodes();
        group.ranks.emplace_back();
      }
      group.node_of_rank.push_back(b);
      group.ranks[static_cast<size_t>(b)].push_back(i);
    }
  }
  if (!group.node_major()) {
    if (world.rank() == 0) {
      ZT_LOG_INFO(key, ": ",
                  group.nodes() < 2 ? "each shard group is on one node"
                                    : "a shard group's ranks are not numbered node by node",
                  ", so it gathers with one all-gather");
    }
    return nullptr;
  }
  auto groups = std::make_shared<NodeGroups>(make_node_groups(shard, group));
  if (world.rank() == 0) {
    ZT_LOG_INFO(key, ": each shard group of ", shard.size(), " ranks gathers across its ",
                group.nodes(), " nodes, then in the node");
  }
  return groups;
}

std::shared_ptr<Communicator> hpz_group(int hpz, Communicator& shard) {
  if (hpz <= 1) return nullptr;
  ZT_CHECK(shard.size() % hpz == 0, "zero_optimization.zero_hpz_partition_size = ", hpz,
           " must divide the ranks the state is sharded over (", shard.size(), ")");
  if (hpz == shard.size()) return nullptr;  // the secondary partition would be the primary one
  std::vector<std::vector<int>> groups(static_cast<size_t>(shard.size() / hpz));
  for (int r = 0; r < shard.size(); ++r) groups[static_cast<size_t>(r / hpz)].push_back(r);
  return split_partition(shard, groups);
}

// Groups of `sp` consecutive ranks (DeepSpeed's initialize_sequence_parallel lays them out so).
std::shared_ptr<Communicator> sequence_group(int sp, Communicator& world) {
  ZT_CHECK(sp >= 1, "sequence_parallel_size must be >= 1, got ", sp);
  ZT_CHECK(world.size() % sp == 0, "sequence_parallel_size = ", sp,
           " must divide the number of ranks (", world.size(), ")");
  if (sp == 1) return nullptr;
  std::vector<std::vector<int>> groups(static_cast<size_t>(world.size() / sp));
  for (int r = 0; r < world.size(); ++r) groups[static_cast<size_t>(r / sp)].push_back(r);
  return split_partition(world, groups);
}

// A split of `world` into groups of n consecutive ranks (the tensor or expert groups) and the
// groups of the ranks with the same index in theirs, striding across them (the ZeRO worlds).
struct SplitGroups {
  std::shared_ptr<Communicator> split, same_index;
};
SplitGroups split_groups(int n, Communicator& world) {
  std::vector<std::vector<int>> split(static_cast<size_t>(world.size() / n));
  std::vector<std::vector<int>> same_index(static_cast<size_t>(n));
  for (int r = 0; r < world.size(); ++r) {
    split[static_cast<size_t>(r / n)].push_back(r);
    same_index[static_cast<size_t>(r % n)].push_back(r);
  }
  SplitGroups g;
  g.split = split_partition(world, split);
  g.same_index = split_partition(world, same_index);
  return g;
}

}  // namespace

std::shared_ptr<const Topology> make_topology(std::shared_ptr<Communicator> world,
                                              const TopologyOptions& options, const Env& env) {
  ZT_CHECK(world != nullptr, "make_topology: communicator is null");
  auto t = std::make_shared<Topology>();
  t->all = world;
  const int tp = options.tensor_parallel_size, ep = options.expert_parallel_size;
  if (ep > 1) {
    const char* no = nullptr;
    if (tp > 1) no = "tensor_parallel.autotp_size";
    if (options.sequence_parallel_size > 1) no = "sequence_parallel_size";
    if (options.shard_size > 0) no = "zero_optimization.mics_shard_size";
    if (options.hpz > 1) no = "zero_optimization.zero_hpz_partition_size";
    ZT_CHECK(no == nullptr, "expert_parallel.autoep_size ", ep, " does not combine with ", no,
             " here (set one of them to its default)");
  }
  ZT_CHECK(tp >= 1 && world->size() % tp == 0, "tensor_parallel.autotp_size = ", tp,
           " must divide the number of ranks (", world->size(), ")");
  if (tp > 1) {
    SplitGroups g = split_groups(tp, *world);
    t->tensor = g.split;
    world = g.same_index;
  }
  ZT_CHECK(ep >= 1 && world->size() % ep == 0, "expert_parallel.autoep_size = ", ep,
           " must divide the number of ranks (", world->size(), ")");
  if (ep > 1) {
    SplitGroups g = split_groups(ep, *world);
    t->expert = g.split;
    t->batch = world;
    world = g.same_index;
  }
  t->world = world;
  if (!t->batch) t->batch = world;
  t->shard = world;
  t->sequence = sequence_group(options.sequence_parallel_size, *world);
  if (options.shard_size > 0) {
    HybridGroups g =
        make_hybrid_groups(world, options.shard_size, "zero_optimization.mics_shard_size");
    t->shard = g.shard;
    t->replica = g.replica;
  }
  t->hpz = hpz_group(options.hpz, *t->shard);
  t->reduce_nodes = reduce_node_groups(options, *t->shard, t->replica != nullptr, env);
  if (options.hierarchical_gather) {
    t->gather_nodes = gather_node_groups(options, *world, *t->shard, env);
  }
  return t;
}

}  // namespace zt::dist
