// --bind-cores-to-rank: DeepSpeed's core list syntax, the plan (even contiguous blocks, one thread
// per physical core, NUMA memory nodes, fake NUMA, interleaved numbering), OMP_NUM_THREADS, the
// flags and their errors, what the transports are given (rank specs, rankfile, mpirun's flags,
// the remote nodes' ztrun flags), and the binding applied in a real child.
#include "launcher/core_binding.h"

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <linux/mempolicy.h>
#include <sstream>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "base/error.h"
#include "launcher/local_launch.h"
#include "launcher/mpi_launch.h"
#include "launcher/options.h"
#include "launcher/remote_launch.h"
#include "launcher/supervisor.h"

namespace zt::launcher {
namespace {

using Cpus = std::vector<int>;

// The message of the zt::Error `f` throws ("" when it does not throw).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const zt::Error& e) {
    return e.message();
  }
  return "";
}

Cpus range(int first, int last) {
  Cpus out;
  for (int c = first; c <= last; ++c) out.push_back(c);
  return out;
}

// A machine without SMT: every allowed CPU is its core's first thread.
CpuLayout plain(const Cpus& allowed, std::vector<Cpus> numa = {}) {
  return CpuLayout{allowed, allowed, std::move(numa)};
}

std::vector<Cpus> cpus_of(const std::vector<RankCores>& plan) {
  std::vector<Cpus> out;
  for (const auto& rc : plan) out.push_back(rc.cpus);
  return out;
}

std::vector<Cpus> nodes_of(const std::vector<RankCores>& plan) {
  std::vector<Cpus> out;
  for (const auto& rc : plan) out.push_back(rc.memory_nodes);
  return out;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(CoreList, ParsesDeepSpeedSyntax) {
  EXPECT_EQ(parse_core_list("1,3-5,7", "f"), (Cpus{1, 3, 4, 5, 7}));
  EXPECT_EQ(parse_core_list("0", "f"), (Cpus{0}));
  EXPECT_EQ(parse_core_list("2-2", "f"), (Cpus{2}));
  EXPECT_EQ(parse_core_list("0-3,8-11", "f"), (Cpus{0, 1, 2, 3, 8, 9, 10, 11}));
  EXPECT_TRUE(parse_core_list("", "f", /*allow_empty=*/true).empty());
}

TEST(CoreList, MalformedListsNameTheFlagAndTheItem) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "--bind-core-list must not be empty"},
      {"x", "--bind-core-list: 'x' in 'x' is neither a core number nor a range a-b with a <= b"},
      {"3-1", "--bind-core-list: '3-1' in '3-1' is neither"},
      {"1-", "'1-' in '1-' is neither"},
      {"-1", "'-1' in '-1' is neither"},
      {"1-2-3", "'1-2-3' in '1-2-3' is neither"},
      {"1,,2", "'' in '1,,2' is neither"},
      {"0,", "'' in '0,' is neither"},
      {" 1", "' 1' in ' 1' is neither"},
      {"1,1", "'1' in '1,1' overlaps or comes before the item ahead of it"},
      {"2,1", "'1' in '2,1' overlaps or comes before"},
      {"0-3,2", "'2' in '0-3,2' overlaps"},
      {"0-99999999", "core 99999999 in '0-99999999' is above 65535"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string msg = error_of([&] { parse_core_list(text, "--bind-core-list"); });
    EXPECT_NE(msg.find(expected), std::string::npos) << "'" << text << "': " << msg;
  }
}

TEST(CoreList, FormatsTheShortestForm) {
  EXPECT_EQ(format_core_list({0, 1, 2, 5}), "0-2,5");
  EXPECT_EQ(format_core_list({3}), "3");
  EXPECT_EQ(format_core_list({1, 3}), "1,3");
  EXPECT_EQ(format_core_list({}), "");
  for (const char* text : {"0-2,5", "7", "0,2,4-9,11"}) {
    EXPECT_EQ(format_core_list(parse_core_list(text, "f")), text);
  }
}

TEST(CorePlan, EvenContiguousBlocksRemainderIdle) {
  const auto plan = plan_core_binding(plain(range(0, 7)), "", 3);
  EXPECT_EQ(cpus_of(plan), (std::vector<Cpus>{{0, 1}, {2, 3}, {4, 5}}));  // 6 and 7 stay idle
  EXPECT_EQ(nodes_of(plan), (std::vector<Cpus>{{}, {}, {}}));  // one node: no memory policy
  EXPECT_EQ(cpus_of(plan_core_binding(plain({0, 1}), "", 2)), (std::vector<Cpus>{{0}, {1}}));
  EXPECT_EQ(cpus_of(plan_core_binding(plain({0, 1}), "", 1)), (std::vector<Cpus>{{0, 1}}));
}

TEST(CorePlan, ExplicitListIsSplitInItsOrder) {
  const auto plan = plan_core_binding(plain(range(0, 7)), "1,3-5,7", 2);
  EXPECT_EQ(cpus_of(plan), (std::vector<Cpus>{{1, 3}, {4, 5}}));
}

TEST(CorePlan, DefaultIsTheAffinityMaskOneThreadPerCore) {
  // ztrun under `taskset -c 2,3,6,7`.
  EXPECT_EQ(cpus_of(plan_core_binding(plain({2, 3, 6, 7}), "", 2)),
            (std::vector<Cpus>{{2, 3}, {6, 7}}));
  // 4 cores with 2 threads each (siblings c and c + 4): the default takes the first threads, an
  // explicit list may name the others.
  const CpuLayout smt{range(0, 7), range(0, 3), {}};
  EXPECT_EQ(cpus_of(plan_core_binding(smt, "", 2)), (std::vector<Cpus>{{0, 1}, {2, 3}}));
  EXPECT_EQ(cpus_of(plan_core_binding(smt, "4-7", 2)), (std::vector<Cpus>{{4, 5}, {6, 7}}));
}

TEST(CorePlan, TooFewCoresOrACoreOutsideTheMaskIsAnError) {
  EXPECT_EQ(error_of([] {
              plan_core_binding(plain({0, 1}), "", 3);
            }),
            "--bind-cores-to-rank: 3 local ranks but 2 cores (one per physical core ztrun may run "
            "on: 0-1); each rank needs at least one");
  EXPECT_EQ(error_of([] { plan_core_binding(plain(range(0, 7)), "2", 2); }),
            "--bind-cores-to-rank: 2 local ranks but 1 core (--bind-core-list 2); each rank needs "
            "at least one");
  EXPECT_EQ(error_of([] {
              plan_core_binding(plain({0, 1}), "1-2", 1);
            }),
            "--bind-core-list: core 2 is not one ztrun may run on (its affinity mask: 0-1)");
}

TEST(CorePlan, SeveralNumaNodesBindEachRanksMemoryToItsNode) {
  const CpuLayout two = plain(range(0, 7), {range(0, 3), range(4, 7)});
  EXPECT_EQ(nodes_of(plan_core_binding(two, "", 2)), (std::vector<Cpus>{{0}, {1}}));
  EXPECT_EQ(nodes_of(plan_core_binding(two, "", 4)), (std::vector<Cpus>{{0}, {0}, {1}, {1}}));
  // A rank across both nodes gets no policy, as DeepSpeed leaves out numactl -m.
  const CpuLayout ten = plain(range(0, 9), {range(0, 4), range(5, 9)});
  const auto plan = plan_core_binding(ten, "", 3);
  EXPECT_EQ(cpus_of(plan), (std::vector<Cpus>{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}}));
  EXPECT_EQ(nodes_of(plan), (std::vector<Cpus>{{0}, {}, {1}}));
  EXPECT_EQ(nodes_of(plan_core_binding(two, "2-5", 1)), (std::vector<Cpus>{{}}));
}

TEST(CorePlan, InterleavedNumberingStillGivesNodeLocalBlocks) {
  const CpuLayout l = plain(range(0, 7), {{0, 2, 4, 6}, {1, 3, 5, 7}});
  const auto plan = plan_core_binding(l, "", 2);
  EXPECT_EQ(cpus_of(plan), (std::vector<Cpus>{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(nodes_of(plan), (std::vector<Cpus>{{0}, {1}}));
}

TEST(CorePlan, FakeNumaNodesAreBoundTogetherCpulessNodesLeftOut) {
  const CpuLayout fake = plain(range(0, 7), {range(0, 3), range(0, 3), range(4, 7), range(4, 7)});
  EXPECT_EQ(nodes_of(plan_core_binding(fake, "", 2)), (std::vector<Cpus>{{0, 1}, {2, 3}}));
  // One node with CPUs and one with memory only (HBM, CXL): one node as far as binding goes.
  const CpuLayout hbm = plain(range(0, 7), {range(0, 7), {}});
  EXPECT_EQ(nodes_of(plan_core_binding(hbm, "", 2)), (std::vector<Cpus>{{}, {}}));
  // CPUs that no node lists come after those that a node does.
  EXPECT_EQ(cpus_of(plan_core_binding(plain(range(0, 3), {{2, 3}}), "", 4)),
            (std::vector<Cpus>{{2}, {3}, {0}, {1}}));
}

TEST(CorePlan, DescribedOnOneLine) {
  const CpuLayout two = plain(range(0, 7), {range(0, 3), range(4, 7)});
  EXPECT_EQ(describe_plan(plan_core_binding(two, "", 2)),
            "local rank 0: cores 0-3 (NUMA node 0), local rank 1: cores 4-7 (NUMA node 1)");
  EXPECT_EQ(describe_plan(plan_core_binding(plain({0, 1}), "", 2)),
            "local rank 0: core 0, local rank 1: core 1");
}

TEST(CoreEnv, OmpNumThreadsFollowsThePlanUnlessGivenWithEnv) {
  EnvMap env{{"OMP_NUM_THREADS", "8"}};
  EXPECT_EQ(apply_binding_environment(&env, {}, 4),
            "OMP_NUM_THREADS=8 from the environment replaced by 4 (cores per rank)");
  EXPECT_EQ(env.at("OMP_NUM_THREADS"), "4");
  EnvMap unset;
  EXPECT_EQ(apply_binding_environment(&unset, {}, 2), "");
  EXPECT_EQ(unset.at("OMP_NUM_THREADS"), "2");
  EnvMap given{{"OMP_NUM_THREADS", "3"}};  // node_environment() applied --env already
  EXPECT_EQ(apply_binding_environment(&given, {"A=1", "OMP_NUM_THREADS=3"}, 4),
            "keeping --env OMP_NUM_THREADS=3 (cores per rank: 4)");
  EXPECT_EQ(given.at("OMP_NUM_THREADS"), "3");
}

TEST(CoreEnv, KmpAffinityIsRefused) {
  EnvMap env{{"KMP_AFFINITY", "compact"}};
  EXPECT_EQ(error_of([&] { apply_binding_environment(&env, {}, 1); }),
            "--bind-cores-to-rank: KMP_AFFINITY is set ('compact'), by which Intel's OpenMP would "
            "re-pin each rank's threads; unset it");
}

TEST(CoreOptions, FlagsInBothSpellings) {
  LaunchOptions o = parse_launch_options({"--bind-cores-to-rank", "prog"});
  EXPECT_TRUE(o.bind_cores_to_rank);
  EXPECT_EQ(o.bind_core_list, "");
  o = parse_launch_options({"--bind_cores_to_rank", "--bind_core_list=0-3,8", "prog"});
  EXPECT_TRUE(o.bind_cores_to_rank);
  EXPECT_EQ(o.bind_core_list, "0-3,8");
  EXPECT_FALSE(parse_launch_options({"prog"}).bind_cores_to_rank);
  // After the program, the flags are the program's.
  EXPECT_FALSE(parse_launch_options({"prog", "--bind-cores-to-rank"}).bind_cores_to_rank);
  const std::string usage = launch_usage();
  EXPECT_NE(usage.find("--bind-cores-to-rank"), std::string::npos);
  EXPECT_NE(usage.find("--bind-core-list"), std::string::npos);
}

TEST(CoreOptions, BadCombinationsAndListsAreOneLineErrors) {
  auto parse_error = [](const std::vector<std::string>& args) {
    return error_of([&] { parse_launch_options(args); });
  };
  EXPECT_EQ(
      parse_error({"--bind-core-list", "0-3", "prog"}),
      "--bind-core-list needs --bind-cores-to-rank (the list is what the ranks are bound to)");
  EXPECT_EQ(
      parse_error({"--bind-cores-to-rank", "--bind-core-list", "4-2", "prog"}),
      "--bind-core-list: '4-2' in '4-2' is neither a core number nor a range a-b with a <= b");
  // An empty value is Boost's to refuse (the split hands it over as `--bind-core-list=`).
  EXPECT_NE(parse_error({"--bind-cores-to-rank", "--bind-core-list", "", "prog"})
                .find("'--bind-core-list' should follow immediately after the equal sign"),
            std::string::npos);
  EXPECT_EQ(parse_error({"--bind-cores-to-rank=1", "prog"}),
            "option --bind-cores-to-rank takes no value, got --bind-cores-to-rank=1");
}

TEST(CoreTransports, RankSpecsCarryEachRanksCores) {
  LaunchOptions o = parse_launch_options({"--nproc-per-node", "2", "--bind-cores-to-rank", "p"});
  o.master_addr = "127.0.0.1";
  NodeSetup node{{{"OMP_NUM_THREADS", "2"}}, {{{0, 1}, {0}}, {{2, 3}, {1}}}};
  const auto specs = rank_specs(o, node, 0);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[1].cores.cpus, (Cpus{2, 3}));
  EXPECT_EQ(specs[1].cores.memory_nodes, (Cpus{1}));
  node.cores.clear();
  EXPECT_TRUE(rank_specs(o, node, 0)[0].cores.cpus.empty());
}

TEST(CoreTransports, MpirunBindsFromARankfile) {
  const LaunchOptions o =
      parse_launch_options({"--nproc-per-node", "2", "--bind-cores-to-rank", "p", "a"});
  NodeSetup node{{{"OMP_NUM_THREADS", "2"}}, {{{0, 1}, {}}, {{2, 3}, {}}}};
  EXPECT_EQ(rankfile_text(node.cores), "rank 0=localhost slot=0-1\nrank 1=localhost slot=2-3\n");
  EXPECT_EQ(mpirun_argv(o, node, "/usr/bin/mpirun", "/z/ztrun", "/tmp/rf", false),
            (std::vector<std::string>{"/usr/bin/mpirun", "-q", "--rankfile", "/tmp/rf", "--mca",
                                      "rmaps_rank_file_physical", "1", "--use-hwthread-cpus", "-x",
                                      "OMP_NUM_THREADS=2", "--oversubscribe", "-np", "2",
                                      "/z/ztrun", kMpiRankFlag, "p", "a"}));
  node.cores[1].memory_nodes = {1};
  const auto numa = mpirun_argv(o, node, "/usr/bin/mpirun", "/z/ztrun", "/tmp/rf", true);
  const auto local_only = std::find(numa.begin(), numa.end(), "hwloc_base_mem_alloc_policy");
  ASSERT_NE(local_only, numa.end());
  EXPECT_EQ(*(local_only + 1), "local_only");
  node.cores.clear();
  const auto unbound = mpirun_argv(o, node, "/usr/bin/mpirun", "/z/ztrun", "", false);
  EXPECT_EQ(std::vector<std::string>(unbound.begin(), unbound.begin() + 4),
            (std::vector<std::string>{"/usr/bin/mpirun", "-q", "--bind-to", "none"}));
  EXPECT_EQ(std::count(unbound.begin(), unbound.end(), "--rankfile"), 0);
}

TEST(CoreTransports, EveryNodesZtrunGetsTheFlags) {
  const LaunchOptions o = parse_launch_options(
      {"--hostfile", "hf", "--bind-cores-to-rank", "--bind-core-list", "0-7", "train"});
  const std::vector<NodeAssignment> nodes{{"n0", {0, 1}}, {"n1", {0, 1}}};
  for (const auto& cmd : node_commands(o, nodes, "/opt/zt/ztrun", "/w")) {
    EXPECT_NE(cmd.remote_command.find(" --bind-cores-to-rank --bind-core-list=0-7 -- train"),
              std::string::npos)
        << cmd.remote_command;
  }
  const LaunchOptions plain_o = parse_launch_options({"--hostfile", "hf", "train"});
  for (const auto& cmd : node_commands(plain_o, nodes, "/opt/zt/ztrun", "/w")) {
    EXPECT_EQ(cmd.remote_command.find("--bind"), std::string::npos) << cmd.remote_command;
  }
}

TEST(CoreMachine, ReadsThisMachine) {
  const CpuLayout l = read_cpu_layout();
  ASSERT_FALSE(l.allowed.empty());
  EXPECT_EQ(static_cast<int>(l.allowed.size()), usable_cores());
  EXPECT_TRUE(std::is_sorted(l.allowed.begin(), l.allowed.end()));
  ASSERT_FALSE(l.one_per_core.empty());
  EXPECT_TRUE(std::includes(l.allowed.begin(), l.allowed.end(), l.one_per_core.begin(),
                            l.one_per_core.end()));
  for (const Cpus& node : l.numa_nodes) EXPECT_TRUE(std::is_sorted(node.begin(), node.end()));
  // Every plan the machine allows is disjoint and inside the mask.
  const int ranks = static_cast<int>(l.one_per_core.size());
  std::vector<int> all;
  for (const auto& rc : plan_core_binding(l, "", ranks)) {
    ASSERT_EQ(rc.cpus.size(), 1u);
    all.push_back(rc.cpus[0]);
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, l.one_per_core);
}

// The last CPU this process may use, alone.
RankCores last_cpu() {
  return RankCores{{read_cpu_layout().allowed.back()}, {}};
}

TEST(CoreMachine, ChildIsBoundBeforeExec) {
  const std::string log =
      (std::filesystem::temp_directory_path() / ("zt_bind_" + std::to_string(::getpid()))).string();
  ChildSpec spec;
  spec.label = "0";
  spec.argv = {"/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status"};
  spec.envp = to_envp(current_environment());
  spec.log_path = log;
  spec.cores = last_cpu();
  SupervisorOptions so;
  so.stdout_to_console = false;
  {
    Supervisor sup(so);
    ASSERT_TRUE(sup.run({spec}).success);
  }
  EXPECT_EQ(slurp(log), "Cpus_allowed_list:\t" + std::to_string(spec.cores.cpus[0]) + "\n");
  std::filesystem::remove(log);
}

TEST(CoreMachine, BindingThatFailsNamesTheStep) {
  ChildSpec spec;
  spec.label = "3";
  spec.argv = {"/bin/true"};
  spec.cores.cpus = {65000};  // no such CPU: sched_setaffinity finds none allowed
  Supervisor sup(SupervisorOptions{});
  EXPECT_EQ(error_of([&] { sup.run({spec}); }),
            "cannot start 3: binding it to cores 65000 (sched_setaffinity): Invalid argument");
}

TEST(CoreMachine, MemoryPolicyAppliesInAChild) {
  const CpuLayout l = read_cpu_layout();
  if (l.numa_nodes.empty()) GTEST_SKIP() << "no /sys/devices/system/node here";
  const RankCores node0{{}, {0}};
  const std::string why = memory_policy_error({node0});
  if (!why.empty()) GTEST_SKIP() << "set_mempolicy is refused here: " << why;
  const BindingMasks masks(node0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (masks.apply_memory_policy() != 0) ::_exit(2);
    int mode = -1;
    unsigned long nodes[16] = {};
    if (::syscall(SYS_get_mempolicy, &mode, nodes, 16 * 64, nullptr, 0) != 0) ::_exit(3);
    ::_exit(mode == MPOL_BIND && nodes[0] == 1UL ? 0 : 4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

}  // namespace
}  // namespace zt::launcher
