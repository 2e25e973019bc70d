#pragma once
// zt::launcher::Supervisor: starts a group of child processes, relays their output, and applies
// torchrun's failure policy.
//
// Contract of run():
//  - Every child runs in its own process group with PR_SET_PDEATHSIG(SIGKILL), stdin from
//    /dev/null, stdout/stderr piped back. Signals go to the whole group (killpg), so a rank's own
//    helpers die with it; if ztrun itself is killed, the kernel kills the children.
//  - Output is relayed line by line: to the console as `[label] line` (stdout to stdout, stderr
//    to stderr, unless redirected to files only), and raw to the child's log file when it has one.
//  - The first child to exit non-zero or by a signal is the group's failure: every other child
//    gets SIGTERM, then SIGKILL after term_timeout_s. run() returns once all children are reaped.
//  - SIGINT/SIGTERM/SIGHUP sent to ztrun while a Supervisor exists are forwarded to every child
//    (then SIGKILL after the grace period); a second such signal escalates to SIGKILL at once.
//    The signal is remembered: later run() calls start nothing and report it again. With
//    stop_on_stdin_eof, EOF on stdin counts as SIGHUP (received_signal == SIGHUP).
//  - SIGUSR1 sent to ztrun is forwarded to every child (the child alone, not its group) and
//    stops nothing: a zerotorch rank dumps its flight recorder on it (`ztrun --dump PID`).
//  - A child with `cores` set binds itself (sched_setaffinity, set_mempolicy) between fork and
//    exec, so the program's first thread already runs where it belongs.
//  - A child that cannot be started (binding or exec fails) makes run() stop the others and throw
//    zt::Error naming the child, the step and the errno text.
// One Supervisor per process (it owns the signal handlers); not thread-safe.

#include <functional>
#include <string>
#include <vector>

#include "launcher/core_binding.h"

namespace zt::launcher {

struct ChildSpec {
  std::string label;  // console prefix and name in messages, e.g. "3" or "node-b"; "": no prefix
  std::vector<std::string> argv;  // argv[0] is searched in PATH
  std::vector<std::string> envp;  // the complete environment, KEY=VALUE
  std::string log_path;           // empty: no log file
  bool append_log = false;        // false truncates (first attempt), true appends (restarts)
  std::string log_header;         // written as the log file's next line when non-empty
  // stdin is a pipe that ztrun holds open until it stops this child (or dies). The hostfile
  // launcher gives it to ssh: the pipe's EOF travels to the remote ztrun, which then stops its
  // ranks (see SupervisorOptions::stop_on_stdin_eof). Such a child is stopped by that EOF alone,
  // SIGKILL after the grace period. Otherwise stdin is /dev/null.
  bool stdin_pipe = false;
  RankCores cores;  // --bind-cores-to-rank; empty: the child keeps ztrun's affinity and policy
};

struct ChildExit {
  int index = -1;     // into the run()'s children
  int exit_code = 0;  // valid when signal == 0
  int signal = 0;     // non-zero: terminated by this signal
  bool failed() const { return signal != 0 || exit_code != 0; }
};

struct SupervisorOptions {
  double monitor_interval_s = 0.1;
  double term_timeout_s = 5.0;
  bool stdout_to_console = true;
  bool stderr_to_console = true;
  // EOF on ztrun's own stdin acts as SIGHUP: the per-node ztrun of a hostfile launch stops when
  // the launching ztrun (or its ssh connection) goes away.
  bool stop_on_stdin_eof = false;
  // Readable fd that asks for a stop (another node failed: NodeLink::stop_fd()); -1 for none.
  int external_stop_fd = -1;
  // Called after each child started, with its pid (its process group id as well).
  std::function<void(int index, int pid)> on_start;
  // Called once, at once, when the first child fails on its own (before the others are stopped).
  std::function<void(const ChildExit&)> on_first_failure;
};

struct GroupOutcome {
  bool success = false;        // every child exited 0
  ChildExit first_failure;     // index -1 when no child failed on its own
  int received_signal = 0;     // a signal ztrun received and forwarded, 0 if none
  bool external_stop = false;  // stopped through SupervisorOptions::external_stop_fd
  double seconds = 0;          // wall time of the run
};

// "SIGTERM" (or "signal 64" for one without a name).
std::string signal_name(int sig);

// "exited with code 3" or "was killed by signal 9 (SIGKILL)".
std::string describe_exit(const ChildExit& e);

class Supervisor {
 public:
  explicit Supervisor(SupervisorOptions options);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  GroupOutcome run(const std::vector<ChildSpec>& children);

  // The signal received so far (0 if none).
  int received_signal() const;

 private:
  SupervisorOptions options_;
};

}  // namespace zt::launcher
