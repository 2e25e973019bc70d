// ztrun's command line: accepted forms, derived topology, and every bad input (bad transport,
// unknown or abbreviated flag, missing program or value, bad number or range, bad env assignment,
// conflicting topology flags) rejected with one zt::Error.
#include "launcher/options.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"

namespace zt::launcher {
namespace {

using Args = std::vector<std::string>;

// The message of the zt::Error that parsing `args` throws ("" when it does not throw).
std::string parse_error(const Args& args) {
  try {
    parse_launch_options(args);
  } catch (const zt::Error& e) {
    return e.message();
  }
  return "";
}

TEST(LaunchOptions, DefaultsFollowTorchrun) {
  const LaunchOptions o = parse_launch_options({"prog"});
  EXPECT_EQ(o.nproc_per_node, 1);
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.node_rank, 0);
  EXPECT_EQ(o.master_port, 29500);
  EXPECT_EQ(o.max_restarts, 0);
  EXPECT_EQ(o.program, "prog");
  EXPECT_TRUE(o.program_args.empty());
  EXPECT_EQ(o.world_size(), 1);
}

TEST(LaunchOptions, ProgramFlagsStayWithTheProgram) {
  const LaunchOptions o =
      parse_launch_options({"--nproc-per-node", "4", "train", "--nproc-per-node", "7", "-x"});
  EXPECT_EQ(o.nproc_per_node, 4);
  EXPECT_EQ(o.program, "train");
  EXPECT_EQ(o.program_args, (Args{"--nproc-per-node", "7", "-x"}));
}

TEST(LaunchOptions, DoubleDashStartsTheProgram) {
  const LaunchOptions o = parse_launch_options({"--nnodes=2", "--", "-weird-name", "a"});
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.program, "-weird-name");
  EXPECT_EQ(o.program_args, (Args{"a"}));
}

TEST(LaunchOptions, UnderscoreSpellingAndEqualsForm) {
  const LaunchOptions o = parse_launch_options(
      {"--nproc_per_node=3", "--node_rank", "1", "--nnodes", "2", "--master_addr", "10.0.0.1",
       "--master-port=1234", "--max_restarts", "2", "--env", "A=1", "--env=B=x=y", "p"});
  EXPECT_EQ(o.nproc_per_node, 3);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.master_addr, "10.0.0.1");
  EXPECT_EQ(o.master_port, 1234);
  EXPECT_EQ(o.max_restarts, 2);
  EXPECT_EQ(o.env, (Args{"A=1", "B=x=y"}));
  EXPECT_EQ(o.world_size(), 6);
  EXPECT_EQ(o.rank_offset(1), 3);
}

TEST(LaunchOptions, UnevenNodeSlots) {
  const LaunchOptions o = parse_launch_options(
      {"--nnodes", "3", "--node-rank", "2", "--nproc-per-node", "4", "--node-slots", "2,1,4", "p"});
  EXPECT_EQ(o.world_size(), 7);
  EXPECT_EQ(o.rank_offset(2), 3);
  EXPECT_EQ(o.local_world_size(1), 1);
}

TEST(LaunchOptions, BoolFlags) {
  const LaunchOptions o = parse_launch_options({"--standalone", "--dry-run", "p"});
  EXPECT_TRUE(o.standalone);
  EXPECT_TRUE(o.dry_run);
}

TEST(LaunchOptions, HelpIsSeenBeforeTheProgramOnly) {
  EXPECT_TRUE(wants_help({"--nnodes", "2", "--help"}));
  EXPECT_TRUE(wants_help({"-h"}));
  EXPECT_FALSE(wants_help({"prog", "--help"}));
  EXPECT_NE(launch_usage().find("--nproc-per-node"), std::string::npos);
}

TEST(LaunchOptions, TransportAndMpirun) {
  EXPECT_EQ(parse_launch_options({"prog"}).transport, Transport::kAuto);
  EXPECT_EQ(parse_launch_options({"--transport", "native", "prog"}).transport, Transport::kNative);
  const LaunchOptions o = parse_launch_options({"--transport=mpi", "--mpirun", "/opt/x", "prog"});
  EXPECT_EQ(o.transport, Transport::kMpi);
  EXPECT_EQ(o.mpirun, "/opt/x");
  EXPECT_STREQ(transport_name(o.transport), "mpi");
  // Several nodes are the native launch's (or mpirun's own); auto decides at launch time.
  EXPECT_EQ(parse_launch_options({"--nnodes", "2", "prog"}).transport, Transport::kAuto);
}

TEST(LaunchOptionsErrors, BadTransport) {
  EXPECT_EQ(parse_error({"--transport", "MPI", "prog"}),
            "--transport must be auto, native or mpi, got 'MPI'");
  EXPECT_NE(parse_error({"--transport", "mpi", "--nnodes", "2", "prog"})
                .find("--transport mpi is single-node"),
            std::string::npos);
  EXPECT_NE(parse_error({"--transport", "mpi", "--hostfile", "h", "prog"})
                .find("--transport mpi is single-node"),
            std::string::npos);
  EXPECT_NE(parse_error({"--mpirun", "", "prog"}).find("'--mpirun'"), std::string::npos);
}

TEST(LaunchOptionsErrors, UnknownFlag) {
  EXPECT_EQ(parse_error({"--nproc-per-nod", "2", "p"}),
            "unknown option --nproc-per-nod (see ztrun --help)");
  EXPECT_NE(parse_error({"--bogus", "p"}).find("unknown option --bogus"), std::string::npos);
  EXPECT_NE(parse_error({"-q", "p"}).find("unknown option -q"), std::string::npos);
}

TEST(LaunchOptionsErrors, AbbreviationIsNotGuessed) {
  EXPECT_NE(parse_error({"--nproc", "2", "p"}).find("unknown option --nproc"), std::string::npos);
}

TEST(LaunchOptionsErrors, MissingProgram) {
  EXPECT_NE(parse_error({}).find("missing PROGRAM"), std::string::npos);
  EXPECT_NE(parse_error({"--nproc-per-node", "2"}).find("missing PROGRAM"), std::string::npos);
  EXPECT_NE(parse_error({"--nproc-per-node", "2", "--"}).find("missing PROGRAM"),
            std::string::npos);
}

TEST(LaunchOptionsErrors, MissingValue) {
  EXPECT_EQ(parse_error({"--nproc-per-node"}), "option --nproc-per-node needs a value");
}

TEST(LaunchOptionsErrors, NprocPerNodeZeroAndNegative) {
  EXPECT_EQ(parse_error({"--nproc-per-node", "0", "p"}), "--nproc-per-node must be >= 1, got 0");
  EXPECT_EQ(parse_error({"--nproc-per-node", "-2", "p"}), "--nproc-per-node must be >= 1, got -2");
}

TEST(LaunchOptionsErrors, NotANumber) {
  const std::string msg = parse_error({"--nproc-per-node", "four", "p"});
  EXPECT_NE(msg.find("nproc-per-node"), std::string::npos) << msg;
  EXPECT_NE(msg.find("four"), std::string::npos) << msg;
}

TEST(LaunchOptionsErrors, RangesOfTheOtherNumbers) {
  EXPECT_EQ(parse_error({"--nnodes", "0", "p"}), "--nnodes must be >= 1, got 0");
  EXPECT_EQ(parse_error({"--nnodes", "2", "--node-rank", "2", "p"}),
            "--node-rank must be in [0, 2), got 2");
  EXPECT_EQ(parse_error({"--master-port", "70000", "p"}),
            "--master-port must be in [1, 65535], got 70000");
  EXPECT_EQ(parse_error({"--max-restarts", "-1", "p"}), "--max-restarts must be >= 0, got -1");
  EXPECT_EQ(parse_error({"--monitor-interval", "0", "p"}), "--monitor-interval must be > 0, got 0");
  EXPECT_EQ(parse_error({"--redirects", "4", "--log-dir", "d", "p"}),
            "--redirects must be 0..3, got 4");
  EXPECT_NE(parse_error({"--redirects", "1", "p"}).find("needs --log-dir"), std::string::npos);
}

TEST(LaunchOptionsErrors, FlagWithoutValueGivenOne) {
  EXPECT_EQ(parse_error({"--standalone=yes", "p"}),
            "option --standalone takes no value, got --standalone=yes");
}

TEST(LaunchOptionsErrors, BadEnvAssignment) {
  EXPECT_EQ(parse_error({"--env", "NOEQUALS", "p"}), "--env needs KEY=VALUE, got 'NOEQUALS'");
  EXPECT_EQ(parse_error({"--env", "=v", "p"}), "--env needs KEY=VALUE, got '=v'");
}

TEST(LaunchOptionsErrors, ConflictingTopologyFlags) {
  EXPECT_NE(parse_error({"--standalone", "--nnodes", "2", "p"}).find("single-node"),
            std::string::npos);
  EXPECT_NE(parse_error({"--standalone", "--master-port", "5", "p"}).find("--standalone"),
            std::string::npos);
  EXPECT_NE(parse_error({"--hostfile", "h", "--nnodes", "2", "p"}).find("--hostfile decides"),
            std::string::npos);
  EXPECT_EQ(parse_error({"--hostfile", "h", "--include", "a", "--exclude", "b", "p"}),
            "--include and --exclude are mutually exclusive");
  EXPECT_EQ(parse_error({"--include", "a", "p"}), "--include/--exclude need --hostfile");
  EXPECT_EQ(parse_error({"--nnodes", "2", "--node-slots", "1,2,3", "p"}),
            "--node-slots has 3 entries but --nnodes is 2");
  EXPECT_NE(parse_error({"--nnodes", "2", "--node-slots", "1,x", "p"}).find("comma-separated"),
            std::string::npos);
}

// torchrun's elastic forms: --nnodes MIN:MAX with the rendezvous flags.
TEST(LaunchOptions, ElasticNnodesAndRendezvousFlags) {
  const LaunchOptions fixed = parse_launch_options({"--nnodes", "3", "prog"});
  EXPECT_FALSE(fixed.elastic);
  EXPECT_EQ(fixed.nnodes, 3);
  const LaunchOptions o = parse_launch_options(
      {"--nnodes", "1:4", "--nproc_per_node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
       "10.0.0.1:29401", "--rdzv-id", "job7", "--rdzv-conf",
       "join_timeout=60,last_call_timeout=5,keep_alive_interval=1,keep_alive_max_attempt=4",
       "--max-restarts", "3", "prog"});
  EXPECT_TRUE(o.elastic);
  EXPECT_EQ(o.min_nodes, 1);
  EXPECT_EQ(o.nnodes, 4);
  EXPECT_EQ(o.master_addr, "10.0.0.1");
  EXPECT_EQ(o.launcher_port, 29401);
  EXPECT_EQ(o.rdzv_id, "job7");
  EXPECT_EQ(o.rdzv_conf.join_timeout_s, 60);
  EXPECT_EQ(o.rdzv_conf.last_call_timeout_s, 5);
  EXPECT_EQ(o.rdzv_conf.keep_alive_interval_s, 1);
  EXPECT_EQ(o.rdzv_conf.keep_alive_max_attempt, 4);
  // torchrun's defaults, and its rendezvous port.
  const LaunchOptions d = parse_launch_options({"--nnodes", "2:2", "--rdzv-endpoint", "h", "p"});
  EXPECT_TRUE(d.elastic);
  EXPECT_EQ(d.launcher_port, 29400);
  EXPECT_EQ(d.rdzv_id, "none");
  EXPECT_EQ(d.rdzv_conf.join_timeout_s, 600);
  EXPECT_EQ(d.rdzv_conf.last_call_timeout_s, 30);
  EXPECT_EQ(d.rdzv_conf.keep_alive_interval_s, 5);
  EXPECT_EQ(d.rdzv_conf.keep_alive_max_attempt, 3);
}

TEST(LaunchOptions, ElasticBadInputsAreOneLineErrors) {
  const std::pair<Args, const char*> cases[] = {
      {{"--nnodes", "2:1", "prog"}, "--nnodes must be N or MIN:MAX"},
      {{"--nnodes", "0:2", "prog"}, "--nnodes must be N or MIN:MAX"},
      {{"--nnodes", "1:x", "prog"}, "--nnodes must be N or MIN:MAX"},
      {{"--nnodes", "1:2", "--node-rank", "1", "prog"}, "the rendezvous assigns node ranks"},
      {{"--nnodes", "1:2", "--transport", "mpi", "prog"}, "--transport native"},
      {{"--nnodes", "1:2", "--hostfile", "h", "prog"}, "--hostfile decides nodes"},
      {{"--nnodes", "1:2", "--rdzv-backend", "static", "prog"}, "static goes with --nnodes N"},
      {{"--nnodes", "2", "--rdzv-backend", "c10d", "prog"}, "c10d goes with --nnodes MIN:MAX"},
      {{"--nnodes", "1:2", "--rdzv-backend", "etcd", "prog"}, "must be c10d or static"},
      {{"--nnodes", "1:2", "--rdzv-conf", "timeout=5", "prog"}, "unknown key 'timeout'"},
      {{"--nnodes", "1:2", "--rdzv-conf", "join_timeout=-1", "prog"}, "positive number"},
      {{"--nnodes", "1:2", "--rdzv-endpoint", "h:99999", "prog"}, "PORT in [1, 65535]"},
      {{"--nnodes", "1:2", "--rdzv-id", "a b", "prog"}, "--rdzv-id must be one word"},
      {{"--nnodes", "2", "--rdzv-endpoint", "h:1", "prog"}, "are for an elastic job"},
  };
  for (const auto& [args, expected] : cases) {
    const std::string error = parse_error(args);
    EXPECT_NE(error.find(expected), std::string::npos)
        << "args " << ::testing::PrintToString(args) << " gave '" << error << "'";
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace zt::launcher
