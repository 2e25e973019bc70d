// The environment each rank gets, the .ztrun_env file, per-rank specs and the per-node ssh
// commands of a hostfile launch.
#include "launcher/rank_env.h"

#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "base/error.h"
#include "launcher/local_launch.h"
#include "launcher/remote_launch.h"

namespace zt::launcher {
namespace {

EnvMap envp_to_map(const std::vector<std::string>& envp) {
  EnvMap m;
  for (const auto& kv : envp) {
    const size_t eq = kv.find('=');
    m[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return m;
}

TEST(RankEnv, EnvFileSyntax) {
  const EnvMap env = parse_env_text(
      "# comment\n\nNCCL_DEBUG=INFO\nexport PATH_EXTRA=/opt/x\nQUOTED=\"a b\"\nEMPTY=\n", "f");
  EXPECT_EQ(env.at("NCCL_DEBUG"), "INFO");
  EXPECT_EQ(env.at("PATH_EXTRA"), "/opt/x");
  EXPECT_EQ(env.at("QUOTED"), "a b");
  EXPECT_EQ(env.at("EMPTY"), "");
  EXPECT_EQ(env.size(), 4u);
}

TEST(RankEnv, EnvFileErrorsNameTheLine) {
  try {
    parse_env_text("A=1\nnot an assignment\n", ".ztrun_env");
    FAIL() << "no error";
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.message(), ".ztrun_env:2: expected KEY=VALUE, got 'not an assignment'");
  }
  EXPECT_THROW(parse_env_text("1A=1\n", "f"), zt::Error);
  EXPECT_TRUE(read_env_file("/nonexistent/.ztrun_env").empty());
}

TEST(RankEnv, LayersApplyInOrder) {
  const std::string path = ::testing::TempDir() + "zt_rank_env_test.env";
  std::ofstream(path) << "FROM_FILE=file\nOVERRIDDEN=file\n";
  bool omp_set = false;
  const EnvMap env = node_environment({{"BASE", "b"}, {"OVERRIDDEN", "base"}}, {path},
                                      {"OVERRIDDEN=flag", "NEW=n"}, 4, 16, &omp_set);
  std::remove(path.c_str());
  EXPECT_EQ(env.at("BASE"), "b");
  EXPECT_EQ(env.at("FROM_FILE"), "file");
  EXPECT_EQ(env.at("OVERRIDDEN"), "flag");
  EXPECT_EQ(env.at("NEW"), "n");
  EXPECT_TRUE(omp_set);
  EXPECT_EQ(env.at(kOmpNumThreads), "4");  // 16 cores / 4 local ranks
}

TEST(RankEnv, OmpThreadsAreKeptWhenSet) {
  bool omp_set = true;
  const EnvMap env = node_environment({{kOmpNumThreads, "7"}}, {}, {}, 4, 16, &omp_set);
  EXPECT_FALSE(omp_set);
  EXPECT_EQ(env.at(kOmpNumThreads), "7");
  EXPECT_EQ(default_omp_threads(3, 2), 1);
  EXPECT_EQ(default_omp_threads(3, 10), 3);
  EXPECT_GE(usable_cores(), 1);
}

TEST(RankEnv, LaunchFactsOverrideEverything) {
  RankIdentity id;
  id.rank = 5;
  id.local_rank = 1;
  id.world_size = 8;
  id.local_world_size = 4;
  id.group_rank = 1;
  id.restart_count = 2;
  id.master_addr = "10.1.1.1";
  id.master_port = 4242;
  const EnvMap env = rank_environment({{"RANK", "99"}, {"KEEP", "k"}}, id);
  EXPECT_EQ(env.at("RANK"), "5");
  EXPECT_EQ(env.at("LOCAL_RANK"), "1");
  EXPECT_EQ(env.at("WORLD_SIZE"), "8");
  EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "4");
  EXPECT_EQ(env.at("GROUP_RANK"), "1");
  EXPECT_EQ(env.at("MASTER_ADDR"), "10.1.1.1");
  EXPECT_EQ(env.at("MASTER_PORT"), "4242");
  EXPECT_EQ(env.at("ZT_RESTART_COUNT"), "2");
  EXPECT_EQ(env.at("KEEP"), "k");
}

TEST(RankSpecs, NodeMajorRanksAndLogFiles) {
  LaunchOptions o = parse_launch_options({"--nnodes", "2", "--node-rank", "1", "--nproc-per-node",
                                          "3", "--log-dir", "/tmp/l", "p", "x"});
  o.master_addr = "h0";
  const auto specs = rank_specs(o, NodeSetup{{{"A", "1"}}, {}}, 1);
  ASSERT_EQ(specs.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const EnvMap env = envp_to_map(specs[i].envp);
    EXPECT_EQ(env.at("RANK"), std::to_string(3 + i));
    EXPECT_EQ(env.at("LOCAL_RANK"), std::to_string(i));
    EXPECT_EQ(env.at("WORLD_SIZE"), "6");
    EXPECT_EQ(env.at("GROUP_RANK"), "1");
    EXPECT_EQ(env.at("ZT_RESTART_COUNT"), "1");
    EXPECT_EQ(env.at("A"), "1");
    EXPECT_EQ(specs[i].label, std::to_string(3 + i));
    EXPECT_EQ(specs[i].log_path, "/tmp/l/rank_" + std::to_string(3 + i) + ".log");
    EXPECT_TRUE(specs[i].append_log);
    EXPECT_EQ(specs[i].log_header, "=== ztrun: restart 1 (ZT_RESTART_COUNT=1) ===");
    EXPECT_EQ(specs[i].argv, (std::vector<std::string>{"p", "x"}));
  }
}

TEST(RemoteLaunch, ShellQuoting) {
  EXPECT_EQ(shell_quote("plain-word_1.0"), "plain-word_1.0");
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
}

TEST(RemoteLaunch, OneCommandPerNodeWithUnevenSlotsAndFilters) {
  LaunchOptions o =
      parse_launch_options({"--hostfile", "hf", "--master-port", "6000", "--ssh-command",
                            "ssh -p 2222", "--env", "K=v w", "train", "--lr", "1e-3"});
  const std::vector<NodeAssignment> nodes{{"n0", {0, 1}}, {"n1", {1}}};
  const auto cmds = node_commands(o, nodes, "/opt/zt/ztrun", "/work dir");
  ASSERT_EQ(cmds.size(), 2u);
  EXPECT_EQ(cmds[1].argv[0], "ssh");
  EXPECT_EQ(cmds[1].argv[1], "-p");
  EXPECT_EQ(cmds[1].argv[2], "2222");
  EXPECT_EQ(cmds[1].argv[3], "n1");
  EXPECT_EQ(cmds[1].argv[4], cmds[1].remote_command);
  const std::string& r = cmds[1].remote_command;
  EXPECT_EQ(r.rfind("cd '/work dir' && /opt/zt/ztrun --nnodes=2 --node-rank=1 --nproc-per-node=1 "
                    "--master-addr=n0 --master-port=6000",
                    0),
            0u)
      << r;
  EXPECT_NE(r.find("--node-slots=2,1"), std::string::npos) << r;
  EXPECT_NE(r.find("--stop-on-stdin-eof"), std::string::npos) << r;
  EXPECT_NE(r.find("'--env=K=v w'"), std::string::npos) << r;
  EXPECT_NE(r.find("--env=CUDA_VISIBLE_DEVICES=1"), std::string::npos) << r;
  EXPECT_NE(r.find("-- train --lr 1e-3"), std::string::npos) << r;
  EXPECT_EQ(cmds[0].remote_command.find("CUDA_VISIBLE_DEVICES"), std::string::npos);
}

TEST(RemoteLaunch, ForwardsNcclAndGlooVariables) {
  const char* vars[] = {"PATH=/bin",
                        "NCCL_SOCKET_IFNAME=eth0",
                        "GLOO_SOCKET_IFNAME=ib0",
                        "NCCL_DEBUG=INFO",
                        "MY_NCCL_X=1",
                        nullptr};
  // --env NCCL_DEBUG=WARN wins over the shell's NCCL_DEBUG.
  EXPECT_EQ(forwarded_env({"NCCL_DEBUG=WARN"}, vars),
            (std::vector<std::string>{"GLOO_SOCKET_IFNAME=ib0", "NCCL_SOCKET_IFNAME=eth0"}));
  EXPECT_TRUE(forwarded_env({}, nullptr).empty());
}

}  // namespace
}  // namespace zt::launcher
