// zt::dist::Env::from_map: every launcher family, partial and contradictory variables.
#include "parallel/env.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "parallel/slurm_lists.h"

namespace zt::dist {
namespace {

// The error's message, or "" when from_map does not throw.
std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    Env::from_map(vars);
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUser);
    return e.message();
  }
  return "";
}

TEST(Env, NoVariablesIsOneRank) {
  Env env = Env::from_map({});
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.local_world_size, 1);
  EXPECT_EQ(env.launcher, "none");
  EXPECT_FALSE(env.has_master());
}

TEST(Env, Torchrun) {
  Env env = Env::from_map({{"RANK", "5"},
                           {"WORLD_SIZE", "8"},
                           {"LOCAL_RANK", "1"},
                           {"LOCAL_WORLD_SIZE", "4"},
                           {"MASTER_ADDR", "10.0.0.1"},
                           {"MASTER_PORT", "29500"}});
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.master_addr, "10.0.0.1");
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_EQ(env.launcher, "torchrun");
  EXPECT_EQ(env.describe(), "rank 5/8 (local 1/4) via torchrun, master 10.0.0.1:29500");
}

TEST(Env, TorchrunWithoutLocalPairIsOneNode) {
  Env env = Env::from_map({{"RANK", "2"}, {"WORLD_SIZE", "3"}});
  EXPECT_EQ(env.local_rank, 2);
  EXPECT_EQ(env.local_world_size, 3);
}

TEST(Env, OpenMpi) {
  Env env = Env::from_map({{"OMPI_COMM_WORLD_RANK", "3"},
                           {"OMPI_COMM_WORLD_SIZE", "4"},
                           {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.launcher, "mpi");
}

TEST(Env, SlurmWithPerNodeRepeatCount) {
  Env env = Env::from_map({{"SLURM_PROCID", "6"},
                           {"SLURM_NTASKS", "8"},
                           {"SLURM_LOCALID", "2"},
                           {"SLURM_NTASKS_PER_NODE", "4(x2)"}});
  EXPECT_EQ(env.rank, 6);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 2);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.launcher, "slurm");
}

// Multi-node srun steps, with the variables srun exports to each task (srun(1), OUTPUT
// ENVIRONMENT VARIABLES, Slurm 22.05): `srun -N 2 --ntasks-per-node 2` on node01 and node02,
// ztrun and torchrun name the node with GROUP_RANK; a value past the node count is refused.
TEST(Env, TorchrunGroupRankIsTheNode) {
  Env env = Env::from_map({{"RANK", "5"},
                           {"WORLD_SIZE", "8"},
                           {"LOCAL_RANK", "1"},
                           {"LOCAL_WORLD_SIZE", "4"},
                           {"GROUP_RANK", "1"}});
  EXPECT_EQ(env.node_rank, 1);
  EXPECT_EQ(env.num_nodes, 2);
  Env alone = Env::from_map({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(alone.node_rank, 0);
  EXPECT_EQ(alone.num_nodes, 1);
  try {
    Env::from_map({{"RANK", "5"},
                   {"WORLD_SIZE", "8"},
                   {"LOCAL_RANK", "1"},
                   {"LOCAL_WORLD_SIZE", "4"},
                   {"GROUP_RANK", "2"}});
    FAIL() << "GROUP_RANK 2 of 2 nodes was accepted";
  } catch (const zt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("GROUP_RANK=2 is outside 0..1"), std::string::npos)
        << e.what();
  }
}

// task 3 (the second task of the second node).
TEST(Env, SlurmTwoNodesTwoTasksEach) {
  Env env = Env::from_map({{"SLURM_PROCID", "3"},
                           {"SLURM_NTASKS", "4"},
                           {"SLURM_LOCALID", "1"},
                           {"SLURM_NODEID", "1"},
                           {"SLURM_STEP_NUM_NODES", "2"},
                           {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
                           {"SLURM_STEP_NODELIST", "node[01-02]"}});
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.node_rank, 1);
  EXPECT_EQ(env.num_nodes, 2);
  EXPECT_EQ(env.nodes, (std::vector<std::string>{"node01", "node02"}));
  EXPECT_EQ(env.launcher, "slurm");
  // No MASTER_ADDR/MASTER_PORT: the step's first node, torchrun's default port.
  EXPECT_EQ(env.master_addr, "node01");
  EXPECT_EQ(env.master_port, 29500);
}

TEST(Env, SlurmUnevenNodesTakeTheirOwnCount) {
  // `srun -n 4 -N 2` placing 3 tasks on the first node and 1 on the second: the task on the
  // second node is alone there (the leading count, 3, would be wrong).
  Env env = Env::from_map({{"SLURM_PROCID", "3"},
                           {"SLURM_NTASKS", "4"},
                           {"SLURM_LOCALID", "0"},
                           {"SLURM_NODEID", "1"},
                           {"SLURM_STEP_TASKS_PER_NODE", "3,1"},
                           {"SLURM_STEP_NODELIST", "gpu7,gpu9"},
                           {"MASTER_ADDR", "10.0.0.1"},
                           {"MASTER_PORT", "1234"}});
  EXPECT_EQ(env.local_world_size, 1);
  EXPECT_EQ(env.node_rank, 1);
  EXPECT_EQ(env.nodes, (std::vector<std::string>{"gpu7", "gpu9"}));
  EXPECT_EQ(env.master_addr, "10.0.0.1");  // given ones win
  EXPECT_EQ(env.master_port, 1234);
}

TEST(Env, SlurmNodeFromRankWithoutNodeId) {
  // Without SLURM_NODEID, Slurm's default block distribution: ranks 4 and 5 on the third node.
  Env env = Env::from_map({{"SLURM_PROCID", "5"},
                           {"SLURM_NTASKS", "7"},
                           {"SLURM_LOCALID", "1"},
                           {"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"}});
  EXPECT_EQ(env.node_rank, 2);
  EXPECT_EQ(env.num_nodes, 4);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_TRUE(env.master_addr.empty());  // no node list: nothing to default to
}

TEST(Env, SlurmStepLayoutErrorsNameTheVariable) {
  std::map<std::string, std::string> base = {{"SLURM_PROCID", "1"},
                                             {"SLURM_NTASKS", "4"},
                                             {"SLURM_LOCALID", "1"},
                                             {"SLURM_NODEID", "0"},
                                             {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}};
  auto error_with = [&](const std::string& k, const std::string& v) {
    auto vars = base;
    vars[k] = v;
    return error_of(vars);
  };
  std::string msg = error_with("SLURM_STEP_TASKS_PER_NODE", "2(x2");
  EXPECT_NE(msg.find("SLURM_STEP_TASKS_PER_NODE='2(x2'"), std::string::npos) << msg;
  msg = error_with("SLURM_STEP_TASKS_PER_NODE", "2(x3)");
  EXPECT_NE(msg.find("counts 6 tasks but SLURM_NTASKS=4"), std::string::npos) << msg;
  msg = error_with("SLURM_NODEID", "2");
  EXPECT_NE(msg.find("SLURM_NODEID=2 but SLURM_STEP_TASKS_PER_NODE='2(x2)' lists 2 node(s)"),
            std::string::npos)
      << msg;
  msg = error_with("SLURM_STEP_NODELIST", "node[1-3]");
  EXPECT_NE(msg.find("SLURM_STEP_NODELIST='node[1-3]' names 3 node(s)"), std::string::npos) << msg;
  msg = error_with("SLURM_STEP_NODELIST", "node[1-2");
  EXPECT_NE(msg.find("SLURM_STEP_NODELIST='node[1-2' has an unclosed '['"), std::string::npos)
      << msg;
}

TEST(SlurmLists, TasksPerNode) {
  using zt::dist::parse_slurm_tasks_per_node;
  EXPECT_EQ(parse_slurm_tasks_per_node("4", "V"), (std::vector<int>{4}));
  EXPECT_EQ(parse_slurm_tasks_per_node("2(x3),1", "V"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(parse_slurm_tasks_per_node("1,3(x2)", "V"), (std::vector<int>{1, 3, 3}));
  EXPECT_THROW(parse_slurm_tasks_per_node("", "V"), zt::Error);
  EXPECT_THROW(parse_slurm_tasks_per_node("2(y2)", "V"), zt::Error);
  EXPECT_THROW(parse_slurm_tasks_per_node("0", "V"), zt::Error);
}

TEST(SlurmLists, Hostlists) {
  using zt::dist::expand_slurm_hostlist;
  using V = std::vector<std::string>;
  EXPECT_EQ(expand_slurm_hostlist("node[01-02]", "V"), (V{"node01", "node02"}));
  EXPECT_EQ(expand_slurm_hostlist("a[1,3-4]b,c", "V"), (V{"a1b", "a3b", "a4b", "c"}));
  EXPECT_EQ(expand_slurm_hostlist("n[098-101]", "V"), (V{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expand_slurm_hostlist("r[1-2]-n[1-2]", "V"), (V{"r1-n1", "r1-n2", "r2-n1", "r2-n2"}));
  EXPECT_EQ(expand_slurm_hostlist("solo", "V"), (V{"solo"}));
  EXPECT_THROW(expand_slurm_hostlist("n[2-1]", "V"), zt::Error);
  EXPECT_THROW(expand_slurm_hostlist("n[a-b]", "V"), zt::Error);
  EXPECT_THROW(expand_slurm_hostlist("a,,b", "V"), zt::Error);
}

TEST(Env, SlurmAllocationWithoutTaskRankIsIgnored) {
  // An salloc shell exports SLURM_NTASKS but is no task of a step.
  Env env = Env::from_map({{"SLURM_NTASKS", "8"}, {"SLURM_NTASKS_PER_NODE", "4(x2)"}});
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.launcher, "none");
}

TEST(Env, TorchrunWinsOverSlurm) {
  // torchrun inside an srun step: SLURM_PROCID is the node's index, not the rank.
  Env env = Env::from_map(
      {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}});
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.launcher, "torchrun");
}

TEST(Env, TorchrunAndMpiMustAgree) {
  Env env = Env::from_map({{"RANK", "1"},
                           {"WORLD_SIZE", "2"},
                           {"OMPI_COMM_WORLD_RANK", "1"},
                           {"OMPI_COMM_WORLD_SIZE", "2"}});
  // Agreeing families: OpenMPI's runtime started the process (ztrun --transport mpi), so the
  // mpi backend is usable and `auto` picks it.
  EXPECT_EQ(env.launcher, "mpi");
  EXPECT_EQ(env.rank, 1);
  std::string msg = error_of({{"RANK", "1"},
                              {"WORLD_SIZE", "2"},
                              {"OMPI_COMM_WORLD_RANK", "0"},
                              {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_NE(msg.find("contradictory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("RANK=1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("OMPI_COMM_WORLD_RANK=0"), std::string::npos) << msg;
}

TEST(Env, PartialVariablesNameTheMissingOne) {
  std::string msg = error_of({{"RANK", "0"}});
  EXPECT_NE(msg.find("RANK is set but WORLD_SIZE is not"), std::string::npos) << msg;
  msg = error_of({{"WORLD_SIZE", "2"}});
  EXPECT_NE(msg.find("WORLD_SIZE is set but RANK is not"), std::string::npos) << msg;
  msg = error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}});
  EXPECT_NE(msg.find("LOCAL_RANK is set but LOCAL_WORLD_SIZE is not"), std::string::npos) << msg;
  msg = error_of({{"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"}});
  EXPECT_NE(msg.find("LOCAL_RANK is set but RANK is not"), std::string::npos) << msg;
  msg = error_of({{"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_NE(msg.find("OMPI_COMM_WORLD_SIZE is set but OMPI_COMM_WORLD_RANK is not"),
            std::string::npos)
      << msg;
  msg = error_of({{"MASTER_ADDR", "host"}});
  EXPECT_NE(msg.find("MASTER_ADDR is set but MASTER_PORT is not"), std::string::npos) << msg;
}

TEST(Env, BadValuesNameTheVariable) {
  std::string msg = error_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}});
  EXPECT_NE(msg.find("RANK=4 is outside 0..WORLD_SIZE-1"), std::string::npos) << msg;
  msg = error_of({{"RANK", "one"}, {"WORLD_SIZE", "4"}});
  EXPECT_NE(msg.find("RANK must be an integer, got 'one'"), std::string::npos) << msg;
  msg = error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}});
  EXPECT_NE(msg.find("WORLD_SIZE must be >= 1"), std::string::npos) << msg;
  msg = error_of(
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "3"}});
  EXPECT_NE(msg.find("LOCAL_WORLD_SIZE=3"), std::string::npos) << msg;
  msg = error_of(
      {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}});
  EXPECT_NE(msg.find("LOCAL_RANK=2 is outside"), std::string::npos) << msg;
  msg = error_of({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}});
  EXPECT_NE(msg.find("MASTER_PORT must be in 1..65535"), std::string::npos) << msg;
  msg = error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "x"}});
  EXPECT_NE(msg.find("SLURM_NTASKS must be an integer"), std::string::npos) << msg;
}

// Which GPU a rank binds (and makes current): its local rank when the node has a GPU per rank,
// device 0 when the launcher shows each rank only its own, an error when ranks would share one.
TEST(Env, CudaDeviceForRank) {
  Env env = Env::from_map(
      {{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}});
  EXPECT_EQ(cuda_device_for_rank(env, 8), 1);
  EXPECT_EQ(cuda_device_for_rank(env, 4), 1);
  EXPECT_EQ(cuda_device_for_rank(env, 1), 0);  // CUDA_VISIBLE_DEVICES per rank
  env.local_rank = 3;
  EXPECT_EQ(cuda_device_for_rank(env, 4), 3);
  EXPECT_EQ(cuda_device_for_rank(Env::from_map({}), 1), 0);
  EXPECT_EQ(cuda_device_for_rank(Env::from_map({}), 8), 0);
  try {
    cuda_device_for_rank(env, 2);
    ADD_FAILURE() << "two GPUs for four ranks accepted";
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUser);
    EXPECT_NE(e.message().find("4 ranks on this node (local world size) but 2 CUDA devices"),
              std::string::npos)
        << e.message();
  }
  EXPECT_THROW(cuda_device_for_rank(env, 0), zt::Error);
}

}  // namespace
}  // namespace zt::dist
