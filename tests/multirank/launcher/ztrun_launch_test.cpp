// Real launches through ztrun: zt_launch_probe ranks that check their environment and reduce
// through a c10d TCPStore; failures injected into one rank; signals to ztrun; leftovers looked
// up in the process table (/proc/*/environ carries a tag unique to each test).
#include <arpa/inet.h>
#include <chrono>
#include <cstdlib>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <netinet/in.h>
#include <set>
#include <signal.h>
#include <sstream>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <gtest/gtest.h>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Args = std::vector<std::string>;

const std::string kZtrun = ZT_ZTRUN_PATH;
const std::string kProbe = ZT_PROBE_PATH;
const std::string kFakeSsh = std::string(ZT_SOURCE_DIR) + "/tests/multirank/launcher/fake_ssh.sh";
constexpr const char* kTagVar = "ZT_LAUNCH_TEST_TAG";

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool bindable(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // as ztrun's listeners do
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

// A master port P with P + 1 (the launcher link's default port) free as well. Both are drawn
// below the kernel's ephemeral range (ip_local_port_range starts at 32768), so the client sockets
// of tests running beside this one cannot take P + 1 between this check and ztrun's bind.
int free_port() {
  static unsigned state = static_cast<unsigned>(getpid()) * 2654435761u;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    state = state * 1103515245u + 12345u;
    const int port = 20000 + static_cast<int>((state >> 8) % 12000);
    if (bindable(port) && bindable(port + 1)) return port;
  }
  ADD_FAILURE() << "no free port pair in [20000, 32001)";
  return 0;
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Result {
  int exit_code = -1;
  int signal = 0;
  double seconds = 0;
  int64_t end_ms = 0;  // wall clock when the command was reaped
  bool timed_out = false;
  std::string output;  // stdout and stderr together
};

// A command started in its own process group with stdout+stderr in a file.
class Launch {
 public:
  // With stdin_pipe, the command's stdin is a pipe whose write end close_stdin() closes.
  Launch(const Args& argv, const std::string& tag, const std::string& out_path,
         const std::map<std::string, std::string>& env = {}, const std::string& cwd = "",
         bool stdin_pipe = false)
      : out_path_(out_path), start_(Clock::now()) {
    int in[2] = {-1, -1};
    if (stdin_pipe && pipe2(in, O_CLOEXEC) != 0) in[0] = in[1] = -1;
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      if (in[0] >= 0) dup2(in[0], 0);
      const int fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      setenv(kTagVar, tag.c_str(), 1);
      unsetenv("OMP_NUM_THREADS");
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
      std::vector<char*> a;
      for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
      a.push_back(nullptr);
      execv(a[0], a.data());
      _exit(127);
    }
    if (in[0] >= 0) close(in[0]);
    stdin_w_ = in[1];
  }
  void close_stdin() {
    if (stdin_w_ >= 0) close(stdin_w_);
    stdin_w_ = -1;
  }
  ~Launch() {
    close_stdin();
    if (!reaped_) {
      killpg(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  std::string output() const { return slurp(out_path_); }

  Result wait(double timeout_s) {
    Result r;
    int status = 0;
    for (;;) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) break;
      if (std::chrono::duration<double>(Clock::now() - start_).count() > timeout_s) {
        r.timed_out = true;
        killpg(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    reaped_ = true;
    r.end_ms = now_ms();
    r.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
    r.output = output();
    return r;
  }

 private:
  pid_t pid_ = -1;
  std::string out_path_;
  Clock::time_point start_;
  bool reaped_ = false;
  int stdin_w_ = -1;
};

// Live (non-zombie) processes whose environment carries KEY=tag.
std::vector<std::string> tagged_processes(const std::string& tag) {
  std::vector<std::string> found;
  const std::string needle = std::string(kTagVar) + "=" + tag;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string env = slurp("/proc/" + name + "/environ");
    std::string stat = slurp("/proc/" + name + "/stat");
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z') continue;
    std::replace(env.begin(), env.end(), '\0', '\n');
    if (("\n" + env).find("\n" + needle + "\n") == std::string::npos) continue;
    std::string cmd = slurp("/proc/" + name + "/cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    found.push_back(name + ": " + cmd);
  }
  return found;
}

// Waits up to `timeout_s` for the tagged processes to disappear; returns the survivors.
std::vector<std::string> survivors(const std::string& tag, double timeout_s = 3.0) {
  const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
  std::vector<std::string> left = tagged_processes(tag);
  while (!left.empty() && Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    left = tagged_processes(tag);
  }
  return left;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

// Seconds from the injected failure (the probe prints its wall-clock time as at_ms=) to the
// launcher's exit: rank start-up (loading LibTorch on a busy machine) does not count.
double reaction_seconds(const Result& r) {
  const size_t at = r.output.find("at_ms=");
  if (at == std::string::npos) return 1e9;
  return static_cast<double>(r.end_ms - std::stoll(r.output.substr(at + 6))) / 1000.0;
}

class ZtrunLaunch : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    tag_ = std::string(info->name()) + "-" + std::to_string(getpid());
    std::replace(tag_.begin(), tag_.end(), '/', '_');  // TEST_P names end in /<param>
    dir_ = fs::temp_directory_path() / ("zt_launch_" + tag_);
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "facts");
  }
  void TearDown() override {
    const auto left = survivors(tag_);
    EXPECT_TRUE(left.empty()) << "processes left behind:\n" << join(left);
    for (const auto& p : tagged_processes(tag_)) kill(std::stoi(p), SIGKILL);
    if (!HasFailure()) fs::remove_all(dir_);
  }

  std::unique_ptr<Launch> start(const Args& ztrun_args, const Args& probe_args = {},
                                const std::map<std::string, std::string>& env = {},
                                const std::string& cwd = "", bool stdin_pipe = false) {
    Args argv{kZtrun};
    argv.insert(argv.end(), ztrun_args.begin(), ztrun_args.end());
    argv.push_back(kProbe);
    argv.push_back("--facts-dir=" + facts_dir());
    argv.insert(argv.end(), probe_args.begin(), probe_args.end());
    return std::make_unique<Launch>(argv, tag_, (dir_ / "ztrun.out").string(), env, cwd,
                                    stdin_pipe);
  }

  Result run(const Args& ztrun_args, const Args& probe_args = {}, double timeout_s = 60,
             const std::map<std::string, std::string>& env = {}, const std::string& cwd = "") {
    return start(ztrun_args, probe_args, env, cwd)->wait(timeout_s);
  }

  std::string facts_dir() const { return (dir_ / "facts").string(); }

  // rank -> the line its probe wrote after the reduction.
  std::map<int, std::string> facts() const {
    std::map<int, std::string> out;
    for (const auto& e : fs::directory_iterator(facts_dir())) {
      const std::string n = e.path().filename().string();  // rank_<r>.txt
      const std::string line = slurp(e.path().string());
      if (line.empty() || line.back() != '\n') continue;  // still being written
      out[std::stoi(n.substr(5))] = line.substr(0, line.size() - 1);
    }
    return out;
  }

  std::map<int, std::string> wait_for_facts(size_t n, double timeout_s = 60) {
    const auto end = Clock::now() + std::chrono::duration<double>(timeout_s);
    auto f = facts();
    while (f.size() < n && Clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      f = facts();
    }
    return f;
  }

  static std::string field(const std::string& line, const std::string& key) {
    std::istringstream in(line);
    for (std::string w; in >> w;) {
      if (w.rfind(key + "=", 0) == 0) return w.substr(key.size() + 1);
    }
    return "";
  }

  std::string tag_;
  fs::path dir_;
};

// The single-node behaviours both transports keep: --transport native (ztrun forks the ranks)
// and --transport mpi (OpenMPI's mpirun starts them through ztrun's rank shim).
class ZtrunTransport : public ZtrunLaunch, public ::testing::WithParamInterface<const char*> {
 protected:
  bool mpi() const { return std::string(GetParam()) == "mpi"; }
  std::unique_ptr<Launch> start(Args ztrun_args, const Args& probe_args = {},
                                const std::map<std::string, std::string>& env = {},
                                const std::string& cwd = "", bool stdin_pipe = false) {
    ztrun_args.insert(ztrun_args.begin(), {"--transport", GetParam()});
    return ZtrunLaunch::start(ztrun_args, probe_args, env, cwd, stdin_pipe);
  }
  Result run(const Args& ztrun_args, const Args& probe_args = {}, double timeout_s = 60,
             const std::map<std::string, std::string>& env = {}, const std::string& cwd = "") {
    return start(ztrun_args, probe_args, env, cwd)->wait(timeout_s);
  }
};

INSTANTIATE_TEST_SUITE_P(Transports, ZtrunTransport, ::testing::Values("native", "mpi"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           return std::string(i.param);
                         });

TEST_P(ZtrunTransport, FourRanksGetTheirEnvironmentAndReduce) {
  const Result r =
      run({"--standalone", "--nproc-per-node", "4", "--log-dir", (dir_ / "logs").string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto f = facts();
  ASSERT_EQ(f.size(), 4u) << r.output;
  const int omp = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 4);
  for (int rank = 0; rank < 4; ++rank) {
    const std::string& line = f.at(rank);
    EXPECT_EQ(field(line, "world"), "4") << line;
    EXPECT_EQ(field(line, "local_rank"), std::to_string(rank)) << line;
    EXPECT_EQ(field(line, "local_world"), "4") << line;
    EXPECT_EQ(field(line, "group"), "0") << line;
    EXPECT_EQ(field(line, "restart"), "0") << line;
    EXPECT_LE(std::stoi(field(line, "omp")), omp) << line;  // affinity may give fewer cores
    const std::string prefixed = "[" + std::to_string(rank) + "] probe rank " +
                                 std::to_string(rank) + " all-reduce sum 10 ok";
    EXPECT_NE(r.output.find(prefixed), std::string::npos) << r.output;
    const std::string log =
        slurp((dir_ / "logs" / ("rank_" + std::to_string(rank) + ".log")).string());
    EXPECT_NE(log.find("all-reduce sum 10 ok"), std::string::npos) << log;
    EXPECT_EQ(log.find("[" + std::to_string(rank) + "]"), std::string::npos) << "log is raw";
  }
  EXPECT_NE(r.output.find("OMP_NUM_THREADS is unset"), std::string::npos) << r.output;
}

TEST_P(ZtrunTransport, ChildExitingThreeStopsTheRestWithinFiveSecondsNamingIt) {
  const Result r =
      run({"--standalone", "--nproc-per-node", "4", "--log-dir", (dir_ / "logs").string()},
          {"--fail-rank=2", "--fail-code=3", "--sleep=60"}, 30);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(reaction_seconds(r), 5.0) << r.output;
  EXPECT_NE(r.output.find("rank 2 (local rank 2) exited with code 3, log " +
                          (dir_ / "logs" / "rank_2.log").string()),
            std::string::npos)
      << r.output;
}

TEST_P(ZtrunTransport, KillNineOfOneRankStopsTheOthers) {
  auto launch = start({"--standalone", "--nproc-per-node", "4"}, {"--sleep=60"});
  const auto f = wait_for_facts(4);
  ASSERT_EQ(f.size(), 4u) << launch->output();
  const auto t0 = Clock::now();
  ASSERT_EQ(kill(std::stoi(field(f.at(1), "pid")), SIGKILL), 0);
  const Result r = launch->wait(30);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("rank 1 (local rank 1) was killed by signal 9 (SIGKILL)"),
            std::string::npos)
      << r.output;
}

TEST_P(ZtrunTransport, SigtermToZtrunLeavesNoProcessBehind) {
  // Ranks ignore SIGTERM (ztrun must escalate to SIGKILL) and leave a `sleep` child each (only
  // the process-group kill reaches it).
  auto launch = start({"--standalone", "--nproc-per-node", "4", "--term-timeout", "1"},
                      {"--sleep=60", "--ignore-sigterm", "--grandchild"});
  ASSERT_EQ(wait_for_facts(4).size(), 4u) << launch->output();
  EXPECT_GE(tagged_processes(tag_).size(), 9u);  // ztrun + 4 ranks + 4 sleeps
  const int64_t sent_ms = now_ms();
  ASSERT_EQ(kill(launch->pid(), SIGTERM), 0);
  const Result r = launch->wait(30);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.output;
  EXPECT_LT(r.end_ms - sent_ms, 4000) << "1 s grace, then SIGKILL";
  // Under mpi, ztrun's one child is mpirun, which passes the signal on to the rank shims.
  EXPECT_NE(r.output.find(std::string("received SIGTERM; forwarding it to ") +
                          (mpi() ? "1 children" : "4 children")),
            std::string::npos)
      << r.output;
  const auto left = survivors(tag_, 1.0);
  EXPECT_TRUE(left.empty()) << join(left);
}

TEST_P(ZtrunTransport, SigkillToZtrunTakesTheRanksAlong) {
  auto launch = start({"--standalone", "--nproc-per-node", "4"}, {"--sleep=60"});
  ASSERT_EQ(wait_for_facts(4).size(), 4u) << launch->output();
  ASSERT_EQ(kill(launch->pid(), SIGKILL), 0);  // no chance to forward: PR_SET_PDEATHSIG acts
  const Result r = launch->wait(10);
  EXPECT_EQ(r.signal, SIGKILL);
  const auto left = survivors(tag_, 3.0);
  EXPECT_TRUE(left.empty()) << join(left);
}

TEST_P(ZtrunTransport, StdinEofStopsANodeLauncher) {
  // What a node's ztrun sees when the hostfile launcher (or its ssh connection) goes away.
  auto launch = start({"--standalone", "--nproc-per-node", "2", "--stop-on-stdin-eof"},
                      {"--sleep=60"}, {}, "", /*stdin_pipe=*/true);
  ASSERT_EQ(wait_for_facts(2).size(), 2u) << launch->output();
  const int64_t closed_ms = now_ms();
  launch->close_stdin();
  const Result r = launch->wait(30);
  EXPECT_EQ(r.exit_code, 128 + SIGHUP) << r.output;
  EXPECT_LT(r.end_ms - closed_ms, 3000) << r.output;
  EXPECT_NE(r.output.find("stdin closed"), std::string::npos) << r.output;
}

TEST_P(ZtrunTransport, MaxRestartsRestartsTheGroupWithRestartCount) {
  // Rank 1 fails in attempts 0 and 1; attempt 2 (ZT_RESTART_COUNT=2) succeeds.
  const Result r = run({"--standalone", "--nproc-per-node", "3", "--max-restarts", "2"},
                       {"--fail-rank=1", "--fail-code=7", "--fail-while-restart-below=2"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 (local rank 1) exited with code 7; restarting all ranks "
                          "(restart 1 of 2)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("(restart 2 of 2)"), std::string::npos) << r.output;
  const auto f = facts();
  ASSERT_EQ(f.size(), 3u);
  for (const auto& [rank, line] : f) EXPECT_EQ(field(line, "restart"), "2") << line;
}

TEST_P(ZtrunTransport, RestartsRunOut) {
  const Result r = run({"--standalone", "--nproc-per-node", "2", "--max-restarts", "1"},
                       {"--fail-rank=0", "--fail-code=5"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("rank 0 (local rank 0) exited with code 5; stopped the other 1 local "
                          "ranks after 1 restarts"),
            std::string::npos)
      << r.output;
}

TEST_P(ZtrunTransport, PortInUseIsAClearError) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  const Result r = run({"--nproc-per-node", "2", "--master-port", std::to_string(port)}, {}, 20);
  close(fd);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("ztrun: error: --master-port " + std::to_string(port) + " is in use"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("probe"), std::string::npos) << "no rank may start";
}

TEST_F(ZtrunLaunch, BadCommandLinesGiveOneLineAndNonZeroExit) {
  const std::vector<std::pair<Args, std::string>> cases{
      {{kZtrun, "--bogus", kProbe}, "ztrun: error: unknown option --bogus"},
      {{kZtrun, "--nproc-per-node", "2"}, "ztrun: error: missing PROGRAM"},
      {{kZtrun, "--nproc-per-node", "0", kProbe}, "ztrun: error: --nproc-per-node must be >= 1"},
      {{kZtrun, "--hostfile", (dir_ / "nohostfile").string(), kProbe},
       "ztrun: error: cannot read --hostfile"},
      {{kZtrun, "--standalone", "/nonexistent/zt_prog"},
       "ztrun: error: cannot execute PROGRAM /nonexistent/zt_prog: no such file"},
      {{kZtrun, "zt_no_such_program_in_path"},
       "ztrun: error: cannot execute PROGRAM zt_no_such_program_in_path: not found in PATH"},
      {{kZtrun, "--transport", "ucx", kProbe},
       "ztrun: error: --transport must be auto, native or mpi, got 'ucx'"},
      {{kZtrun, "--transport", "mpi", "--nnodes", "2", kProbe},
       "ztrun: error: --transport mpi is single-node"},
      {{kZtrun, "--transport", "mpi", "--mpirun", "/nonexistent/mpirun", kProbe},
       "ztrun: error: --transport mpi needs OpenMPI's mpirun: --mpirun /nonexistent/mpirun: not "
       "found"},
      {{kZtrun, "--transport", "mpi", "--mpirun", "/bin/true", kProbe},
       "ztrun: error: --transport mpi needs OpenMPI's mpirun: --mpirun /bin/true: /bin/true is not "
       "OpenMPI's"},
  };
  for (const auto& [argv, expected] : cases) {
    const Result r = Launch(argv, tag_, (dir_ / "bad.out").string()).wait(20);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(r.output.rfind(expected, 0), 0u) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
  std::ofstream(dir_ / "hostfile") << "good slots=2\n\nbad slots=two\n";
  const Result r = Launch({kZtrun, "--hostfile", (dir_ / "hostfile").string(), kProbe}, tag_,
                          (dir_ / "bad.out").string())
                       .wait(20);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("hostfile:3: expected 'HOSTNAME slots=N'"), std::string::npos)
      << r.output;
}

TEST_P(ZtrunTransport, EnvFileEnvFlagsAndOmpThreads) {
  std::ofstream(dir_ / ".ztrun_env") << "# read by every node's ztrun\nZT_PROBE_FILE=from_file\n"
                                        "ZT_PROBE_BOTH=file\n";
  const Result r =
      run({"--standalone", "--nproc-per-node", "2", "--env", "ZT_PROBE_BOTH=flag", "--env",
           "OMP_NUM_THREADS=5"},
          {"--print-env=ZT_PROBE_FILE", "--print-env=ZT_PROBE_BOTH"}, 60, {}, dir_.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* rank : {"[0]", "[1]"}) {
    EXPECT_NE(r.output.find(std::string(rank) + " env ZT_PROBE_FILE=from_file"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find(std::string(rank) + " env ZT_PROBE_BOTH=flag"), std::string::npos)
        << r.output;
  }
  for (const auto& [rank, line] : facts()) EXPECT_EQ(field(line, "omp"), "5") << line;
  EXPECT_EQ(r.output.find("OMP_NUM_THREADS is unset"), std::string::npos) << r.output;
}

TEST_F(ZtrunLaunch, HostfileLaunchRunsOneZtrunPerNode) {
  // Two "hosts" with unequal slots, started through a stand-in for ssh that runs here.
  std::ofstream(dir_ / "hostfile") << "node-a slots=1\nnode-b slots=3  # uneven on purpose\n";
  const Args common{"--hostfile",    (dir_ / "hostfile").string(),
                    "--ssh-command", kFakeSsh,
                    "--master-addr", "127.0.0.1",
                    "--master-port", std::to_string(free_port())};
  Args dry = common;
  dry.push_back("--dry-run");
  const Result d = run(dry);
  ASSERT_EQ(d.exit_code, 0) << d.output;
  EXPECT_NE(d.output.find(kFakeSsh + " node-b 'cd "), std::string::npos) << d.output;
  EXPECT_NE(d.output.find("--node-rank=1 --nproc-per-node=3"), std::string::npos) << d.output;
  EXPECT_NE(d.output.find("--node-slots=1,3"), std::string::npos) << d.output;
  EXPECT_TRUE(facts().empty());

  const Result r = run(common);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto f = facts();
  ASSERT_EQ(f.size(), 4u) << r.output;
  const int expected_group[] = {0, 1, 1, 1};
  const int expected_local[] = {0, 0, 1, 2};
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(field(f.at(rank), "world"), "4");
    EXPECT_EQ(field(f.at(rank), "group"), std::to_string(expected_group[rank]));
    EXPECT_EQ(field(f.at(rank), "local_rank"), std::to_string(expected_local[rank]));
  }
  EXPECT_NE(r.output.find("[node-b] [3] probe rank 3 all-reduce sum 10 ok"), std::string::npos)
      << r.output;
}

TEST_F(ZtrunLaunch, HostfileNodeFailureStopsTheOtherNodes) {
  std::ofstream(dir_ / "hostfile") << "node-a slots=2\nnode-b slots=2\n";
  const Result r = run({"--hostfile", (dir_ / "hostfile").string(), "--ssh-command", kFakeSsh,
                        "--master-addr", "127.0.0.1", "--master-port", std::to_string(free_port())},
                       {"--fail-rank=3", "--fail-code=9", "--sleep=60"}, 30);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_LT(reaction_seconds(r), 5.0) << r.output;
  EXPECT_NE(r.output.find("rank 3 (local rank 1) exited with code 9"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("rank 3 exited with code 9 on node 1 (node-b); stopped all 2 nodes"),
            std::string::npos)
      << r.output;
}

// Two "nodes" on this host (ztrun --nnodes 2 twice); the netns test does the same across a veth.
class ZtrunTwoNodes : public ZtrunLaunch {
 protected:
  std::unique_ptr<Launch> start_node(int node, const Args& probe_args) {
    Args argv{kZtrun,
              "--nnodes",
              "2",
              "--node-rank",
              std::to_string(node),
              "--nproc-per-node",
              "2",
              "--master-port",
              std::to_string(port_),
              kProbe,
              "--facts-dir=" + facts_dir()};
    argv.insert(argv.end(), probe_args.begin(), probe_args.end());
    return std::make_unique<Launch>(argv, tag_,
                                    (dir_ / ("node" + std::to_string(node) + ".out")).string());
  }
  // The store's port and the launcher link's (port + 1) must both be free.
  void SetUp() override {
    ZtrunLaunch::SetUp();
    port_ = free_port();
  }
  int port_ = 0;
};

TEST_F(ZtrunTwoNodes, FailureOnNodeOneStopsNodeZero) {
  auto n0 = start_node(0, {"--fail-rank=3", "--fail-code=6", "--sleep=60"});
  auto n1 = start_node(1, {"--fail-rank=3", "--fail-code=6", "--sleep=60"});
  const Result r1 = n1->wait(60);
  const Result r0 = n0->wait(60);
  EXPECT_EQ(r1.exit_code, 1) << r1.output;
  EXPECT_NE(r1.output.find("rank 3 (local rank 1) exited with code 6"), std::string::npos)
      << r1.output;
  EXPECT_EQ(r0.exit_code, 1) << r0.output;
  EXPECT_NE(r0.output.find("another node failed: rank 3 exited with code 6 on node 1; stopped all "
                           "2 local ranks"),
            std::string::npos)
      << r0.output;
  EXPECT_LT(r0.end_ms - r1.end_ms, 5000) << "node 0 must stop within seconds of node 1";
}

TEST_F(ZtrunTwoNodes, KilledNodeLauncherStopsTheOtherNode) {
  auto n0 = start_node(0, {"--sleep=60"});
  auto n1 = start_node(1, {"--sleep=60"});
  ASSERT_EQ(wait_for_facts(4).size(), 4u) << n0->output() << n1->output();
  const int64_t killed_ms = now_ms();
  ASSERT_EQ(kill(n1->pid(), SIGKILL), 0);  // its ranks die by PR_SET_PDEATHSIG
  const Result r0 = n0->wait(60);
  EXPECT_EQ(r0.exit_code, 1) << r0.output;
  EXPECT_NE(r0.output.find("another node failed: node 1's ztrun went away without finishing"),
            std::string::npos)
      << r0.output;
  EXPECT_LT(r0.end_ms - killed_ms, 5000);
}

TEST_F(ZtrunLaunch, AutoTransportIsMpirunOnOneCpuNodeAndNativeWithoutIt) {
  if (fs::exists("/dev/nvidiactl")) GTEST_SKIP() << "a GPU node: auto keeps the native launch";
  const Result dry = run({"--standalone", "--nproc-per-node", "2", "--dry-run"});
  ASSERT_EQ(dry.exit_code, 0) << dry.output;
  EXPECT_NE(dry.output.find(" -np 2 " + kZtrun + " --mpi-rank " + kProbe), std::string::npos)
      << dry.output;
  // No OpenMPI: the native launch, said in one line.
  const Result r =
      run({"--standalone", "--nproc-per-node", "2", "--mpirun", "/nonexistent/mpirun"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--transport auto: starting the ranks natively, no OpenMPI mpirun "
                          "(--mpirun /nonexistent/mpirun: not found)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("(node 0 of 1, rendezvous"), std::string::npos) << r.output;
  EXPECT_EQ(facts().size(), 2u) << r.output;
}

TEST_F(ZtrunLaunch, MpirunDiscoversTheSameRanksAsZtrun) {
  const Result z = run({"--standalone", "--nproc-per-node", "4"});
  ASSERT_EQ(z.exit_code, 0) << z.output;
  const auto ztrun_facts = facts();
  fs::remove_all(facts_dir());
  fs::create_directories(facts_dir());
  Args argv;
  std::istringstream mpi(ZT_MPIRUN_COMMAND);
  for (std::string w; mpi >> w;) argv.push_back(w);
  for (const std::string& a :
       {std::string("-np"), std::string("4"), kProbe, "--facts-dir=" + facts_dir(),
        std::string("--master-addr=127.0.0.1"), "--master-port=" + std::to_string(free_port())}) {
    argv.push_back(a);
  }
  const Result m = Launch(argv, tag_, (dir_ / "mpirun.out").string()).wait(60);
  ASSERT_EQ(m.exit_code, 0) << m.output;
  EXPECT_NE(m.output.find("source=mpirun"), std::string::npos) << m.output;
  const auto mpi_facts = facts();
  ASSERT_EQ(mpi_facts.size(), 4u);
  for (int rank = 0; rank < 4; ++rank) {
    for (const char* key : {"world", "local_rank", "local_world"}) {
      EXPECT_EQ(field(mpi_facts.at(rank), key), field(ztrun_facts.at(rank), key))
          << key << " of rank " << rank;
    }
  }
}

}  // namespace
