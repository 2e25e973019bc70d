#include "parallel/groups.h"

#include <algorithm>
#include <map>

#include <ATen/ATen.h>

#include "base/error.h"

namespace zt::dist {

std::shared_ptr<Communicator> split_partition(Communicator& world,
                                              const std::vector<std::vector<int>>& groups) {
  std::vector<int> seen(world.size(), 0);
  for (const auto& g : groups) {
    ZT_CHECK(!g.empty(), "split_partition: an empty group");
    for (int r : g) {
      ZT_CHECK(r >= 0 && r < world.size(), "split_partition: rank ", r, " is outside 0..",
               world.size() - 1);
      ZT_CHECK(seen[r]++ == 0, "split_partition: rank ", r, " is in two groups");
    }
  }
  for (int r = 0; r < world.size(); ++r)
    ZT_CHECK(seen[r] == 1, "split_partition: rank ", r, " is in no group");
  // One split per group: each is collective over the world, and a rank keeps the one it is in.
  std::shared_ptr<Communicator> mine;
  for (const auto& g : groups) {
    std::shared_ptr<Communicator> c = world.split(g);
    if (c) mine = std::move(c);
  }
  ZT_INTERNAL_ASSERT(mine != nullptr, "split_partition: rank ", world.rank(), " got no group");
  return mine;
}

bool NodeLayout::uniform() const {
  for (const auto& r : ranks)
    if (r.size() != ranks.front().size()) return false;
  return true;
}

bool NodeLayout::node_major() const {
  if (nodes() < 2 || !uniform()) return false;
  const int local = static_cast<int>(ranks.front().size());
  for (int b = 0; b < nodes(); ++b) {
    for (int l = 0; l < local; ++l) {
      if (ranks[b][l] != b * local + l) return false;
    }
  }
  return true;
}

NodeLayout discover_node_layout(Communicator& world, const Env& env) {
  int node = 0;
  if (env.num_nodes > 1) {
    node = env.node_rank;
  } else if (env.local_world_size < env.world_size) {
    ZT_CHECK(env.rank % env.local_world_size == env.local_rank,
             "cannot tell this rank's node: ", "rank ", env.rank, " has local rank ",
             env.local_rank, " of ", env.local_world_size,
             ", which is not rank % local world size, and the launcher gave no node rank ",
             "(GROUP_RANK or SLURM_NODEID); number ranks node by node (mpirun --map-by slot)");
    node = env.rank / env.local_world_size;
  }
  at::Tensor mine =
      at::tensor({static_cast<int64_t>(node), static_cast<int64_t>(env.local_rank)}, at::kLong)
          .to(world.device());
  at::Tensor all = at::empty({2 * world.size()}, mine.options());
  world.all_gather(mine, all)->wait();
  all = all.cpu();
  const int64_t* v = all.data_ptr<int64_t>();
  // Node indices as the launcher numbers them may skip values (a Slurm node without tasks of
  // this step): renumber them densely, in order.
  std::map<int64_t, std::vector<std::pair<int64_t, int>>> by_node;
  for (int r = 0; r < world.size(); ++r) by_node[v[2 * r]].push_back({v[2 * r + 1], r});
  NodeLayout layout;
  layout.node_of_rank.assign(world.size(), 0);
  for (auto& [key, members] : by_node) {
    std::sort(members.begin(), members.end());
    std::vector<int> ranks;
    for (size_t i = 0; i < members.size(); ++i) {
      ZT_CHECK(i == 0 || members[i].first != members[i - 1].first, "ranks ", members[i - 1].second,
               " and ", members[i].second, " both claim local rank ", members[i].first, " on node ",
               key, " (check LOCAL_RANK / GROUP_RANK, or OMPI_COMM_WORLD_LOCAL_RANK)");
      ranks.push_back(members[i].second);
      layout.node_of_rank[members[i].second] = static_cast<int>(layout.ranks.size());
    }
    layout.ranks.push_back(std::move(ranks));
  }
  return layout;
}

NodeGroups make_node_groups(Communicator& world, const NodeLayout& layout) {
  NodeGroups g;
  g.intra = split_partition(world, layout.ranks);
  // Across nodes: the i-th rank of every node that has one.
  size_t widest = 0;
  for (const auto& r : layout.ranks) widest = std::max(widest, r.size());
  std::vector<std::vector<int>> across(widest);
  for (const auto& r : layout.ranks)
    for (size_t i = 0; i < r.size(); ++i) across[i].push_back(r[i]);
  g.inter = split_partition(world, across);
  return g;
}

HybridGroups make_hybrid_groups(std::shared_ptr<Communicator> world, int shard_size,
                                const char* key) {
  const int n = world->size();
  ZT_CHECK(shard_size >= 1 && shard_size <= n && n % shard_size == 0, key, " = ", shard_size,
           " must divide the number of ranks (", n, ")");
  HybridGroups g;
  g.shard_size = shard_size;
  if (shard_size == n) {  // plain sharding: nothing to replicate across
    g.shard = std::move(world);
    return g;
  }
  std::vector<std::vector<int>> shards(n / shard_size), replicas(shard_size);
  for (int r = 0; r < n; ++r) {
    shards[r / shard_size].push_back(r);
    replicas[r % shard_size].push_back(r);
  }
  g.shard = split_partition(*world, shards);
  g.replica = split_partition(*world, replicas);
  return g;
}

}  // namespace zt::dist
