// parallel/topology.h in one process: the groups a one-rank job can have, and the one-line error
// for a group that cannot be cut. The multi-rank layouts (hybrid sharding, hpZ, the node groups)
// are tests/multirank/core/engine/hybrid_shard_test.cpp's.

#include "parallel/topology.h"

#include <string>

#include <gtest/gtest.h>

#include "base/error.h"
#include "parallel/dist.h"

namespace zt::dist {
namespace {

TEST(Topology, OneRankIsItsOwnShardGroupAndMakesNoGroupThatCannotHelp) {
  const Env env = Env::from_map({});
  std::shared_ptr<Communicator> world = create_communicator(CommOptions{}, env);
  auto plain = make_topology(world, TopologyOptions{}, env);
  EXPECT_EQ(plain->world, world);
  EXPECT_EQ(plain->shard, world);
  EXPECT_EQ(plain->replica, nullptr);
  EXPECT_EQ(plain->hpz, nullptr);
  EXPECT_EQ(plain->reduce_nodes, nullptr);
  EXPECT_EQ(plain->gather_nodes, nullptr);

  // Everything asked for: one rank on one node has no replica, no second partition and no
  // node groups (the collectives stay flat).
  TopologyOptions all;
  all.shard_size = 1;
  all.quantized_reduce = true;
  all.hierarchical_reduce = TopologyOptions::TwoLevel::kOn;
  all.hierarchical_gather = true;
  auto t = make_topology(world, all, env);
  EXPECT_EQ(t->shard->size(), 1);
  EXPECT_EQ(t->replica, nullptr);
  EXPECT_EQ(t->reduce_nodes, nullptr);
  EXPECT_EQ(t->gather_nodes, nullptr);

  TopologyOptions hpz;
  hpz.hpz = 2;
  try {
    make_topology(world, hpz, env);
    ADD_FAILURE() << "an hpZ group larger than the shard group was made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("zero_hpz_partition_size = 2 must divide"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace zt::dist
