// The failure policy and output relay of Supervisor, on small /bin/sh children.
#include "launcher/supervisor.h"

#include <chrono>
#include <fcntl.h>
#include <fstream>
#include <signal.h>
#include <sstream>
#include <thread>
#include <unistd.h>

#include <gtest/gtest.h>

#include "base/error.h"
#include "launcher/rank_env.h"

namespace zt::launcher {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ChildSpec sh(const std::string& label, const std::string& script) {
  ChildSpec s;
  s.label = label;
  s.argv = {"/bin/sh", "-c", script};
  s.envp = to_envp(current_environment());
  return s;
}

SupervisorOptions fast_options() {
  SupervisorOptions o;
  o.monitor_interval_s = 0.05;
  o.term_timeout_s = 2.0;
  return o;
}

// Sends fd 1 and 2 to files while alive, so a test can read what the supervisor printed.
class CaptureConsole {
 public:
  // Per process: ctest runs these tests in parallel processes.
  CaptureConsole()
      : out_path_(::testing::TempDir() + "zt_sup_out_" + std::to_string(getpid())),
        err_path_(out_path_ + "_err") {
    fflush(stdout);
    fflush(stderr);
    saved_out_ = dup(1);
    saved_err_ = dup(2);
    const int o = open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(o, 1);
    dup2(e, 2);
    close(o);
    close(e);
  }
  ~CaptureConsole() { restore(); }
  void restore() {
    if (saved_out_ < 0) return;
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out_, 1);
    dup2(saved_err_, 2);
    close(saved_out_);
    close(saved_err_);
    saved_out_ = saved_err_ = -1;
  }
  std::string out() const { return slurp(out_path_); }
  std::string err() const { return slurp(err_path_); }

 private:
  std::string out_path_, err_path_;
  int saved_out_ = -1, saved_err_ = -1;
};

bool process_gone(pid_t pid) {
  if (kill(pid, 0) != 0) return true;
  // A zombie waiting for init to reap it is gone for our purpose.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_s, comm, state;
  stat >> pid_s >> comm >> state;
  return state == "Z" || state.empty();
}

TEST(Supervisor, RelaysPrefixedLinesAndWritesLogs) {
  const std::string log = ::testing::TempDir() + "zt_sup_rank1.log";
  std::vector<ChildSpec> children{sh("0", "echo zero; echo oops >&2"),
                                  sh("1", "printf 'one\\npartial'")};
  children[1].log_path = log;
  Supervisor sup(fast_options());
  CaptureConsole cap;
  const GroupOutcome out = sup.run(children);
  cap.restore();
  EXPECT_TRUE(out.success);
  EXPECT_EQ(out.first_failure.index, -1);
  EXPECT_NE(cap.out().find("[0] zero\n"), std::string::npos) << cap.out();
  EXPECT_NE(cap.out().find("[1] one\n"), std::string::npos) << cap.out();
  EXPECT_NE(cap.out().find("[1] partial\n"), std::string::npos) << cap.out();
  EXPECT_NE(cap.err().find("[0] oops\n"), std::string::npos) << cap.err();
  EXPECT_EQ(cap.out().find("oops"), std::string::npos);
  EXPECT_EQ(slurp(log), "one\npartial\n");
}

TEST(Supervisor, RedirectedStreamGoesToTheLogOnly) {
  const std::string log = ::testing::TempDir() + "zt_sup_redirect.log";
  std::vector<ChildSpec> children{sh("0", "echo to-file; echo to-console >&2")};
  children[0].log_path = log;
  SupervisorOptions o = fast_options();
  o.stdout_to_console = false;
  Supervisor sup(o);
  CaptureConsole cap;
  EXPECT_TRUE(sup.run(children).success);
  cap.restore();
  EXPECT_EQ(cap.out(), "");
  EXPECT_NE(cap.err().find("[0] to-console"), std::string::npos);
  EXPECT_EQ(slurp(log), "to-file\nto-console\n");
}

TEST(Supervisor, FirstFailureStopsTheOthersQuickly) {
  std::vector<ChildSpec> children{sh("0", "exec sleep 30"), sh("1", "sleep 0.2; exit 3"),
                                  sh("2", "exec sleep 30")};
  Supervisor sup(fast_options());
  const GroupOutcome out = sup.run(children);
  EXPECT_FALSE(out.success);
  EXPECT_EQ(out.first_failure.index, 1);
  EXPECT_EQ(out.first_failure.exit_code, 3);
  EXPECT_EQ(out.first_failure.signal, 0);
  EXPECT_EQ(describe_exit(out.first_failure), "exited with code 3");
  EXPECT_LT(out.seconds, 2.0);  // SIGTERM ends `sleep` at once; no wait for the grace period
}

TEST(Supervisor, KilledChildIsAFailureNamingTheSignal) {
  std::vector<ChildSpec> children{sh("0", "exec sleep 30"), sh("1", "kill -9 $$")};
  Supervisor sup(fast_options());
  const GroupOutcome out = sup.run(children);
  EXPECT_EQ(out.first_failure.index, 1);
  EXPECT_EQ(out.first_failure.signal, SIGKILL);
  EXPECT_EQ(describe_exit(out.first_failure), "was killed by signal 9 (SIGKILL)");
}

TEST(Supervisor, SigtermIgnoringChildGetsSigkillAfterTheGracePeriod) {
  // `trap '' TERM` is inherited by sleep, so only SIGKILL ends this child.
  std::vector<ChildSpec> children{sh("0", "trap '' TERM; sleep 30"), sh("1", "sleep 0.2; exit 1")};
  SupervisorOptions o = fast_options();
  o.term_timeout_s = 0.5;
  Supervisor sup(o);
  const GroupOutcome out = sup.run(children);
  EXPECT_EQ(out.first_failure.index, 1);
  EXPECT_GE(out.seconds, 0.6);
  EXPECT_LT(out.seconds, 3.0);
}

TEST(Supervisor, LeftoverGrandchildrenAreKilled) {
  const std::string pid_file = ::testing::TempDir() + "zt_sup_grandchild.pid";
  std::vector<ChildSpec> children{sh("0", "sleep 30 & echo $! > " + pid_file + "; exit 0")};
  Supervisor sup(fast_options());
  EXPECT_TRUE(sup.run(children).success);
  const pid_t grandchild = std::stoi(slurp(pid_file));
  for (int i = 0; i < 50 && !process_gone(grandchild); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(process_gone(grandchild)) << "pid " << grandchild;
}

TEST(Supervisor, StdinPipeReachesEofWhenTheGroupStops) {
  // Child 0 ignores SIGTERM and waits for EOF on stdin: only the closed pipe ends it before the
  // 5 s grace period, as a remote ztrun behind ssh ends when its stdin closes.
  const std::string log = ::testing::TempDir() + "zt_sup_stdin.log";
  std::vector<ChildSpec> children{sh("0", "trap '' TERM; cat >/dev/null; echo eof-seen; exit 0"),
                                  sh("1", "sleep 0.3; exit 1")};
  children[0].stdin_pipe = true;
  children[0].log_path = log;
  children[0].log_header = "=== header ===";
  SupervisorOptions o = fast_options();
  o.term_timeout_s = 5.0;
  Supervisor sup(o);
  const GroupOutcome out = sup.run(children);
  EXPECT_EQ(out.first_failure.index, 1);
  EXPECT_LT(out.seconds, 2.0);
  EXPECT_EQ(slurp(log), "=== header ===\neof-seen\n");
}

TEST(Supervisor, ExecFailureThrowsNamingTheProgram) {
  std::vector<ChildSpec> children{sh("0", "exec sleep 30"), sh("1", "")};
  children[1].argv = {"/nonexistent/zt_program"};
  Supervisor sup(fast_options());
  try {
    sup.run(children);
    FAIL() << "no error";
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.message(), "cannot start 1: /nonexistent/zt_program: No such file or directory");
  }
}

TEST(Supervisor, SignalToTheLauncherIsForwardedAndRemembered) {
  std::vector<ChildSpec> children{sh("0", "exec sleep 30"), sh("1", "exec sleep 30")};
  Supervisor sup(fast_options());
  std::thread killer([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kill(getpid(), SIGTERM);
  });
  const GroupOutcome out = sup.run(children);
  killer.join();
  EXPECT_FALSE(out.success);
  EXPECT_EQ(out.received_signal, SIGTERM);
  EXPECT_EQ(out.first_failure.index, -1);  // the children died of our signal, not on their own
  EXPECT_LT(out.seconds, 2.0);
  // A later attempt (a restart) starts nothing.
  const GroupOutcome again = sup.run(children);
  EXPECT_EQ(again.received_signal, SIGTERM);
  EXPECT_LT(again.seconds, 0.1);
}

}  // namespace
}  // namespace zt::launcher
