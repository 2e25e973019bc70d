#include "launcher/supervisor.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"
#include "base/logging.h"

namespace zt::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// Self-pipe: the handlers only write a byte, the watch loop wakes from poll() and looks at
// g_signal. SIGCHLD uses it too, so a dying child is seen at once, not at the next interval.
int g_wake_pipe[2] = {-1, -1};
volatile sig_atomic_t g_signal = 0;        // last SIGINT/SIGTERM/SIGHUP received
volatile sig_atomic_t g_signal_count = 0;  // how many of them
int g_stdin_closed = 0;                    // stop_on_stdin_eof saw EOF: like a SIGHUP
constexpr size_t kMaxLine = 64 * 1024;     // longer output without '\n' is cut into lines
constexpr double kDrainSeconds = 1.0;      // pipes kept open by orphans after the last reap

volatile sig_atomic_t g_dump_count = 0;  // SIGUSR1s received: dump requests to forward

extern "C" void on_signal(int sig) {
  const int saved = errno;
  if (sig == SIGUSR1) {
    g_dump_count = g_dump_count + 1;
  } else if (sig != SIGCHLD) {
    g_signal = sig;
    g_signal_count = g_signal_count + 1;
  }
  const char byte = 0;
  [[maybe_unused]] ssize_t n = ::write(g_wake_pipe[1], &byte, 1);
  errno = saved;
}

}  // namespace

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

namespace {

void write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;  // console gone (EPIPE) or disk full: output is best effort, the ranks go on
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// One pipe from a child: buffers a partial line until its '\n' arrives.
struct Stream {
  int fd = -1;
  bool is_stderr = false;
  std::string partial;
};

struct Child {
  const ChildSpec* spec = nullptr;
  pid_t pid = -1;
  bool alive = false;
  int log_fd = -1;
  int stdin_w = -1;  // our end of the child's stdin pipe (ChildSpec::stdin_pipe)
  Stream out, err;
  std::string prefix;  // "[label] "
};

// Everything the child needs, built before fork(): after fork only async-signal-safe calls.
struct ExecArgs {
  std::vector<std::string> argv_store, envp_store;
  std::vector<char*> argv, envp;
  BindingMasks binding;
  explicit ExecArgs(const ChildSpec& spec)
      : argv_store(spec.argv), envp_store(spec.envp), binding(spec.cores) {
    for (auto& a : argv_store) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : envp_store) envp.push_back(e.data());
    envp.push_back(nullptr);
  }
};

// What a child that could not start writes to the parent through its close-on-exec pipe.
enum class StartStep : int { kExec, kAffinity, kMemoryPolicy };
struct StartFailure {
  StartStep step = StartStep::kExec;
  int err = 0;
};

class Group {
 public:
  Group(const SupervisorOptions& options, const std::vector<ChildSpec>& specs)
      : options_(options), children_(specs.size()) {
    for (size_t i = 0; i < specs.size(); ++i) {
      children_[i].spec = &specs[i];
      // An unlabelled child (mpirun, whose ranks label their own lines) is relayed as it is.
      children_[i].prefix = specs[i].label.empty() ? "" : "[" + specs[i].label + "] ";
    }
  }

  ~Group() {
    for (Child& c : children_) {
      close_fd(&c.out.fd);
      close_fd(&c.err.fd);
      close_fd(&c.log_fd);
      close_fd(&c.stdin_w);
    }
  }

  GroupOutcome run() {
    const auto start = Clock::now();
    try {
      for (size_t i = 0; i < children_.size(); ++i) {
        start_child(i);
        if (options_.on_start) options_.on_start(static_cast<int>(i), children_[i].pid);
      }
    } catch (...) {
      begin_stop(SIGTERM);
      kill_all(SIGKILL);  // a failed start is our error, not a rank's: no grace needed
      watch();
      throw;
    }
    if (g_signal != 0) {  // arrived while starting: the children never saw it
      outcome_.received_signal = g_signal;
      begin_stop(g_signal);
    }
    watch();
    outcome_.success = outcome_.received_signal == 0 && outcome_.first_failure.index < 0 &&
                       !outcome_.external_stop;
    outcome_.seconds = seconds_since(start);
    return outcome_;
  }

 private:
  static void close_fd(int* fd) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }

  void start_child(size_t index) {
    Child& c = children_[index];
    const ChildSpec& spec = *c.spec;
    ZT_INTERNAL_ASSERT(!spec.argv.empty(), "child ", spec.label, " has no argv");
    if (!spec.log_path.empty()) {
      const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (spec.append_log ? O_APPEND : O_TRUNC);
      c.log_fd = ::open(spec.log_path.c_str(), flags, 0644);
      ZT_CHECK(c.log_fd >= 0, "cannot open log file ", spec.log_path, ": ", std::strerror(errno));
      if (!spec.log_header.empty()) {
        const std::string header = spec.log_header + "\n";
        write_all(c.log_fd, header.data(), header.size());
      }
    }
    int in_pipe[2] = {-1, -1};
    if (spec.stdin_pipe) {
      ZT_CHECK(::pipe2(in_pipe, O_CLOEXEC) == 0, "pipe2() failed: ", std::strerror(errno));
    }
    int out_pipe[2], err_pipe[2], exec_pipe[2];
    ZT_CHECK(::pipe2(out_pipe, O_CLOEXEC) == 0 && ::pipe2(err_pipe, O_CLOEXEC) == 0 &&
                 ::pipe2(exec_pipe, O_CLOEXEC) == 0,
             "pipe2() failed: ", std::strerror(errno));
    ExecArgs args(spec);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    ZT_CHECK(pid >= 0, "fork() failed for ", spec.label, ": ", std::strerror(errno));
    if (pid == 0) exec_child(args, parent, in_pipe[0], out_pipe[1], err_pipe[1], exec_pipe[1]);
    // Both sides set the group, so that killpg() works whichever runs first.
    ::setpgid(pid, pid);
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    ::close(exec_pipe[1]);
    if (in_pipe[0] >= 0) ::close(in_pipe[0]);
    c.stdin_w = in_pipe[1];
    c.pid = pid;
    c.alive = true;
    c.out = {out_pipe[0], false, {}};
    c.err = {err_pipe[0], true, {}};
    StartFailure failure;
    ssize_t n;
    do {
      n = ::read(exec_pipe[0], &failure, sizeof(failure));
    } while (n < 0 && errno == EINTR);
    ::close(exec_pipe[0]);
    if (n <= 0) return;
    const std::string who = spec.label.empty() ? "child" : spec.label;
    switch (failure.step) {
      case StartStep::kAffinity:
        ZT_THROW("cannot start ", who, ": binding it to cores ", format_core_list(spec.cores.cpus),
                 " (sched_setaffinity): ", std::strerror(failure.err));
      case StartStep::kMemoryPolicy:
        ZT_THROW("cannot start ", who, ": binding its memory to NUMA nodes ",
                 format_core_list(spec.cores.memory_nodes),
                 " (set_mempolicy): ", std::strerror(failure.err));
      case StartStep::kExec: break;
    }
    ZT_THROW("cannot start ", who, ": ", spec.argv[0], ": ", std::strerror(failure.err));
  }

  [[noreturn]] static void fail_start(int exec_fd, StartStep step, int err) {
    const StartFailure failure{step, err};
    [[maybe_unused]] ssize_t w = ::write(exec_fd, &failure, sizeof(failure));
    ::_exit(127);
  }

  [[noreturn]] static void exec_child(ExecArgs& args, pid_t parent, int in_fd, int out_fd,
                                      int err_fd, int exec_fd) {
    // Defaults again: the children must die of the signals ztrun forwards.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE, SIGUSR1})
      ::sigaction(s, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // ztrun died before prctl took effect
    if (in_fd < 0) in_fd = ::open("/dev/null", O_RDONLY);
    if (in_fd >= 0) ::dup2(in_fd, STDIN_FILENO);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    if (const int err = args.binding.apply_affinity()) {
      fail_start(exec_fd, StartStep::kAffinity, err);
    }
    if (const int err = args.binding.apply_memory_policy()) {
      fail_start(exec_fd, StartStep::kMemoryPolicy, err);
    }
    ::execvpe(args.argv[0], args.argv.data(), args.envp.data());
    fail_start(exec_fd, StartStep::kExec, errno);
  }

  void emit_line(Child& c, const Stream& s, const char* data, size_t n) {
    if (c.log_fd >= 0) {
      std::string raw(data, n);
      raw.push_back('\n');
      write_all(c.log_fd, raw.data(), raw.size());
    }
    const bool console = s.is_stderr ? options_.stderr_to_console : options_.stdout_to_console;
    if (!console) return;
    // One write() per line, so lines of different ranks never interleave mid-line.
    std::string line = c.prefix;
    line.append(data, n);
    line.push_back('\n');
    write_all(s.is_stderr ? STDERR_FILENO : STDOUT_FILENO, line.data(), line.size());
  }

  // Reads what is there; on EOF flushes the partial line and closes the pipe.
  void pump(Child& c, Stream& s) {
    char buf[16384];
    const ssize_t n = ::read(s.fd, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
      if (!s.partial.empty()) emit_line(c, s, s.partial.data(), s.partial.size());
      s.partial.clear();
      close_fd(&s.fd);
      return;
    }
    s.partial.append(buf, static_cast<size_t>(n));
    size_t begin = 0;
    for (size_t nl; (nl = s.partial.find('\n', begin)) != std::string::npos; begin = nl + 1) {
      emit_line(c, s, s.partial.data() + begin, nl - begin);
    }
    s.partial.erase(0, begin);
    if (s.partial.size() >= kMaxLine) {
      emit_line(c, s, s.partial.data(), s.partial.size());
      s.partial.clear();
    }
  }

  // A child with a stdin pipe (ssh to a node's ztrun) is asked to stop by the pipe's EOF, which
  // ssh carries to the remote side; a signal would only end the local ssh client and cut the
  // remote ztrun's last words. It gets SIGKILL if it outlives the grace period.
  void kill_all(int sig) {
    for (Child& c : children_) {
      const bool by_stdin = c.stdin_w >= 0 && sig != SIGKILL;
      close_fd(&c.stdin_w);
      if (c.alive && !by_stdin) ::killpg(c.pid, sig);
    }
  }

  void begin_stop(int sig) {
    if (stopping_) return;
    stopping_ = true;
    kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(options_.term_timeout_s));
    kill_all(sig);
  }

  void reap() {
    for (size_t i = 0; i < children_.size(); ++i) {
      Child& c = children_[i];
      if (!c.alive) continue;
      int status = 0;
      const pid_t r = ::waitpid(c.pid, &status, WNOHANG);
      if (r != c.pid) continue;
      c.alive = false;
      close_fd(&c.stdin_w);
      --alive_;
      last_reap_ = Clock::now();
      ChildExit e;
      e.index = static_cast<int>(i);
      if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
      if (WIFEXITED(status)) e.exit_code = WEXITSTATUS(status);
      if (e.failed() && !stopping_) {
        outcome_.first_failure = e;
        if (options_.on_first_failure) options_.on_first_failure(e);
        begin_stop(SIGTERM);
      }
    }
  }

  // ztrun's own stdin (stop_on_stdin_eof): data is ignored, EOF or a hang-up stops the group.
  void on_stdin() {
    char buf[4096];
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof(buf));
    if (n > 0 || (n < 0 && (errno == EINTR || errno == EAGAIN))) return;
    g_stdin_closed = 1;  // a later run() (a restart) starts nothing
    if (!stopping_) {
      outcome_.received_signal = SIGHUP;
      ZT_LOG_WARN("stdin closed (the launching ztrun is gone); stopping ", alive_, " children");
      begin_stop(SIGTERM);
    }
  }

  void on_wake() {
    char drain[64];
    while (::read(g_wake_pipe[0], drain, sizeof(drain)) > 0) {
    }
    if (g_dump_count != seen_dumps_) {
      seen_dumps_ = g_dump_count;
      forward_dump_request();
    }
    const int count = g_signal_count;
    if (count == seen_signals_) return;
    seen_signals_ = count;
    // During a teardown the failure stays the cause; a later run() (a restart) starts nothing.
    if (!stopping_) {
      outcome_.received_signal = g_signal;
      ZT_LOG_WARN("received ", signal_name(g_signal), "; forwarding it to ", alive_, " children");
      begin_stop(g_signal);
    } else {
      kill_all(SIGKILL);  // asked twice: no more grace
    }
  }

  // SIGUSR1 asks every rank for its flight recorder dump (parallel/flight_recorder.h): sent to
  // the child itself, not its group, so helpers of a rank are not killed by it. A child reached
  // through its stdin pipe (ssh to another node) is skipped: the signal would end the ssh client;
  // each node's ztrun is asked on its own node.
  void forward_dump_request() {
    int sent = 0;
    for (Child& c : children_) {
      if (c.alive && c.stdin_w < 0 && ::kill(c.pid, SIGUSR1) == 0) ++sent;
    }
    ZT_LOG_INFO("received SIGUSR1; forwarded it to ", sent, " children (flight recorder dump)");
  }

  // The watch loop: until every child is reaped and every pipe closed (or drained for a while).
  void watch() {
    for (const Child& c : children_) alive_ += c.alive ? 1 : 0;
    seen_signals_ = g_signal_count;
    bool killed = false, orphans_killed = false;
    for (;;) {
      std::vector<pollfd> fds{{g_wake_pipe[0], POLLIN, 0}};
      std::vector<std::pair<Child*, Stream*>> owners{{nullptr, nullptr}};
      const bool watch_stdin = options_.stop_on_stdin_eof && !g_stdin_closed;
      if (watch_stdin) {
        fds.push_back({STDIN_FILENO, POLLIN, 0});
        owners.emplace_back(nullptr, nullptr);
      }
      const bool watch_external = options_.external_stop_fd >= 0 && !stopping_;
      if (watch_external) {
        fds.push_back({options_.external_stop_fd, POLLIN, 0});
        owners.emplace_back(nullptr, nullptr);
      }
      for (Child& c : children_) {
        for (Stream* s : {&c.out, &c.err}) {
          if (s->fd < 0) continue;
          fds.push_back({s->fd, POLLIN, 0});
          owners.emplace_back(&c, s);
        }
      }
      const size_t first_stream = 1 + (watch_stdin ? 1 : 0) + (watch_external ? 1 : 0);
      if (alive_ == 0 && fds.size() == first_stream) return;
      if (alive_ == 0 && !orphans_killed) {
        // Every child is gone but something (a rank's own child) still holds its pipe: the rank's
        // process group goes too, so nothing outlives ztrun.
        for (Child& c : children_) ::killpg(c.pid, SIGKILL);
        orphans_killed = true;
      }
      if (alive_ == 0 && seconds_since(last_reap_) > kDrainSeconds) return;
      double timeout_s = options_.monitor_interval_s;
      if (stopping_ && !killed) {
        timeout_s = std::min(timeout_s,
                             std::chrono::duration<double>(kill_deadline_ - Clock::now()).count());
      }
      const int timeout_ms = std::max(0, static_cast<int>(timeout_s * 1000.0));
      const int rc = ::poll(fds.data(), fds.size(), timeout_ms);
      ZT_CHECK(rc >= 0 || errno == EINTR, "poll() failed: ", std::strerror(errno));
      if (rc > 0) {
        if (fds[0].revents) on_wake();
        if (watch_stdin && fds[1].revents) on_stdin();
        if (watch_external && fds[first_stream - 1].revents && !stopping_) {
          outcome_.external_stop = true;
          begin_stop(SIGTERM);
        }
        for (size_t i = first_stream; i < fds.size(); ++i) {
          if (fds[i].revents) pump(*owners[i].first, *owners[i].second);
        }
      }
      reap();
      if (stopping_ && !killed && Clock::now() >= kill_deadline_) {
        kill_all(SIGKILL);
        killed = true;
      }
    }
  }

  const SupervisorOptions& options_;
  std::vector<Child> children_;
  GroupOutcome outcome_;
  int alive_ = 0;
  int seen_signals_ = 0;
  int seen_dumps_ = 0;
  bool stopping_ = false;
  Clock::time_point kill_deadline_{};
  Clock::time_point last_reap_ = Clock::now();
};

constexpr int kHandled[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGUSR1};
constexpr size_t kNumHandled = sizeof(kHandled) / sizeof(kHandled[0]);
struct sigaction g_old_actions[kNumHandled];

}  // namespace

std::string describe_exit(const ChildExit& e) {
  if (e.signal != 0) {
    return "was killed by signal " + std::to_string(e.signal) + " (" + signal_name(e.signal) + ")";
  }
  return "exited with code " + std::to_string(e.exit_code);
}

Supervisor::Supervisor(SupervisorOptions options) : options_(options) {
  ZT_INTERNAL_ASSERT(g_wake_pipe[0] < 0, "only one Supervisor per process");
  ZT_CHECK(::pipe2(g_wake_pipe, O_CLOEXEC | O_NONBLOCK) == 0,
           "pipe2() failed: ", std::strerror(errno));
  g_signal = 0;
  g_signal_count = 0;
  g_dump_count = 0;
  g_stdin_closed = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  for (size_t i = 0; i < kNumHandled; ++i) ::sigaction(kHandled[i], &sa, &g_old_actions[i]);
  // A closed console must not kill ztrun while ranks still run.
  ::signal(SIGPIPE, SIG_IGN);
}

Supervisor::~Supervisor() {
  for (size_t i = 0; i < kNumHandled; ++i) ::sigaction(kHandled[i], &g_old_actions[i], nullptr);
  ::close(g_wake_pipe[0]);
  ::close(g_wake_pipe[1]);
  g_wake_pipe[0] = g_wake_pipe[1] = -1;
}

int Supervisor::received_signal() const {
  return g_signal;
}

GroupOutcome Supervisor::run(const std::vector<ChildSpec>& children) {
  if (g_signal != 0 || g_stdin_closed) {
    GroupOutcome o;
    o.received_signal = g_signal != 0 ? static_cast<int>(g_signal) : SIGHUP;
    return o;
  }
  Group group(options_, children);
  return group.run();
}

}  // namespace zt::launcher
