#include "launcher/mpi_launch.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <sys/prctl.h>
#include <unistd.h>

#include "base/env_vars.h"
#include "base/error.h"
#include "base/logging.h"
#include "base/remove_tree.h"
#include "launcher/local_launch.h"
#include "launcher/port.h"
#include "launcher/rank_env.h"
#include "launcher/remote_launch.h"
#include "launcher/supervisor.h"

#ifndef ZT_BUILD_MPIEXEC
#define ZT_BUILD_MPIEXEC ""
#endif

namespace zt::launcher {
namespace {

namespace fs = std::filesystem;

// What the launching ztrun tells its rank shims, through mpirun's environment (mpirun passes its
// own environment to the processes it starts on its node). The shims remove them again.
constexpr const char* kShimWorld = "ZTRUN_MPI_WORLD_SIZE";
constexpr const char* kShimRestart = "ZTRUN_MPI_RESTART_COUNT";
constexpr const char* kShimFailureFile = "ZTRUN_MPI_FAILURE_FILE";
constexpr const char* kShimLogDir = "ZTRUN_MPI_LOG_DIR";
constexpr const char* kShimRedirects = "ZTRUN_MPI_REDIRECTS";
constexpr const char* kShimTermTimeout = "ZTRUN_MPI_TERM_TIMEOUT";
constexpr const char* kShimMonitorInterval = "ZTRUN_MPI_MONITOR_INTERVAL";
constexpr const char* kShimGroupsFile = "ZTRUN_MPI_GROUPS_FILE";
// mpirun stops a job by SIGTERM to every process and SIGKILL after odls_base_sigkill_timeout
// (1 s), a wait it takes in full even when all have gone: raising it to --term-timeout made every
// failure take that long (12 s instead of 1 s in ztrun_launch_test). So under mpi the ranks get
// mpirun's 1 s, and ztrun gives mpirun --term-timeout plus this before its own SIGKILL.
constexpr double kMpirunExtraGraceS = 2.0;
// The NVIDIA driver's control device: a GPU node, where `auto` keeps the native launch.
constexpr const char* kNvidiaControlDevice = "/dev/nvidiactl";

bool executable_file(const std::string& p) {
  return ::access(p.c_str(), X_OK) == 0 && !fs::is_directory(p);
}

// Like execvp's search: a name with '/' is taken as it is, others are looked up in PATH.
std::string search_path(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    return executable_file(name) ? fs::absolute(name).string() : "";
  }
  const char* path = ::zt::env::get(env::kPath);
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (executable_file(candidate)) return fs::absolute(candidate).string();
  }
  return "";
}

// OpenMPI's mpirun (orterun in 4.x, prterun in 5.x) says "mpirun (Open MPI) 4.1.4" to
// --version; MPICH's (hydra) says "HYDRA build details" and takes other flags.
bool is_openmpi_launcher(const std::string& path) {
  FILE* pipe = ::popen((shell_quote(path) + " --version 2>&1").c_str(), "r");
  if (pipe == nullptr) return false;
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) text.append(buf, n);
  const int status = ::pclose(pipe);
  return status == 0 &&
         (text.find("Open MPI") != std::string::npos || text.find("OpenRTE") != std::string::npos);
}

std::string self_executable() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  ZT_CHECK(!ec, "cannot find ztrun's own executable (/proc/self/exe): ", ec.message());
  return self.string();
}

// A directory for the shims' failure record, removed when the launch ends.
class TempDir {
 public:
  TempDir() {
    const char* tmp = ::zt::env::get(env::kTmpDir);
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/ztrun-mpi-XXXXXX";
    ZT_CHECK(::mkdtemp(pattern.data()) != nullptr, "cannot create a directory like ", pattern, ": ",
             std::strerror(errno));
    path_ = pattern;
  }
  ~TempDir() { remove_tree(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The failure a shim recorded: "rank<TAB>local rank<TAB>how it ended"; "" when none did.
std::string read_failure(const LaunchOptions& o, const std::string& file) {
  std::ifstream in(file);
  std::string rank, local, how;
  if (!std::getline(in, rank, '\t') || !std::getline(in, local, '\t') || !std::getline(in, how)) {
    return "";
  }
  std::string what = "rank " + rank + " (local rank " + local + ") " + how;
  const std::string log = rank_log_path(o, std::stoi(rank));
  if (!log.empty()) what += ", log " + log;
  return what;
}

// What a rank leaves behind when mpirun SIGKILLs its shim (the rank itself dies of
// PR_SET_PDEATHSIG, its own children would not): every rank's process group goes, as a native
// launch's does.
void kill_rank_groups(const std::string& groups_file) {
  std::ifstream in(groups_file);
  for (long pgid; in >> pgid;) {
    if (pgid > 1) ::killpg(static_cast<pid_t>(pgid), SIGKILL);
  }
}

std::string join_quoted(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + shell_quote(a);
  return out;
}

}  // namespace

std::string find_openmpi_launcher(const std::string& requested, std::string* why) {
  std::vector<std::pair<std::string, std::string>> tried;  // (what, where found or "")
  if (!requested.empty()) {
    tried.emplace_back("--mpirun " + requested, search_path(requested));
  } else {
    tried.emplace_back("mpirun on PATH", search_path("mpirun"));
    const std::string built = ZT_BUILD_MPIEXEC;
    if (!built.empty()) tried.emplace_back(built + " (found at build time)", search_path(built));
  }
  std::string notes;
  for (const auto& [what, found] : tried) {
    if (!found.empty() && is_openmpi_launcher(found)) return found;
    notes += (notes.empty() ? "" : ", ") + what +
             (found.empty() ? ": not found" : ": " + found + " is not OpenMPI's");
  }
  if (why) *why = notes;
  return "";
}

TransportChoice resolve_transport(const LaunchOptions& o) {
  TransportChoice choice;
  if (o.transport == Transport::kNative) return choice;
  if (o.transport == Transport::kAuto) {
    if (o.nnodes > 1) {
      choice.reason = "several nodes";
      return choice;
    }
    if (fs::exists(kNvidiaControlDevice)) {
      choice.reason = std::string("a GPU node (") + kNvidiaControlDevice + ")";
      return choice;
    }
  }
  std::string why;
  choice.mpirun = find_openmpi_launcher(o.mpirun, &why);
  if (choice.mpirun.empty()) {
    ZT_CHECK(o.transport == Transport::kAuto, "--transport mpi needs OpenMPI's mpirun: ", why);
    choice.reason = "no OpenMPI mpirun (" + why + ")";
    return choice;
  }
  choice.transport = Transport::kMpi;
  return choice;
}

std::string rankfile_text(const std::vector<RankCores>& plan) {
  std::string text;
  for (size_t r = 0; r < plan.size(); ++r) {
    // localhost: OpenMPI takes it for the node mpirun runs on (--transport mpi is single-node).
    text +=
        "rank " + std::to_string(r) + "=localhost slot=" + format_core_list(plan[r].cpus) + "\n";
  }
  return text;
}

std::vector<std::string> mpirun_argv(const LaunchOptions& o, const NodeSetup& node,
                                     const std::string& mpirun, const std::string& self,
                                     const std::string& rankfile, bool as_root) {
  // -q: mpirun's multi-line banners off (ztrun writes the one line); --oversubscribe: more ranks
  // than cores, as a native launch allows.
  std::vector<std::string> argv{mpirun, "-q"};
  if (node.cores.empty()) {
    // The ranks' OpenMP threads may use every core (OpenMPI binds 2 ranks to one core each by
    // default).
    argv.insert(argv.end(), {"--bind-to", "none"});
  } else {
    argv.insert(argv.end(), {"--rankfile", rankfile, "--mca", "rmaps_rank_file_physical", "1",
                             "--use-hwthread-cpus", "-x",
                             std::string(kOmpNumThreads) + "=" + node.env.at(kOmpNumThreads)});
    const bool numa = std::any_of(node.cores.begin(), node.cores.end(),
                                  [](const RankCores& rc) { return !rc.memory_nodes.empty(); });
    if (numa) argv.insert(argv.end(), {"--mca", "hwloc_base_mem_alloc_policy", "local_only"});
  }
  argv.push_back("--oversubscribe");
  if (as_root) argv.push_back("--allow-run-as-root");
  argv.insert(argv.end(), {"-np", std::to_string(o.nproc_per_node), self, kMpiRankFlag});
  argv.push_back(o.program);
  argv.insert(argv.end(), o.program_args.begin(), o.program_args.end());
  return argv;
}

int launch_mpi(const LaunchOptions& o, const std::string& mpirun) {
  ZT_INTERNAL_ASSERT(!o.master_addr.empty() && o.master_port > 0, "unresolved master address");
  ZT_INTERNAL_ASSERT(o.nnodes == 1, "--transport mpi with ", o.nnodes, " nodes");
  const NodeSetup node = prepare_node(o);
  const bool as_root = ::geteuid() == 0;
  if (o.dry_run) {
    std::cout << "mpirun: "
              << join_quoted(mpirun_argv(o, node, mpirun, self_executable(), "RANKFILE", as_root))
              << "\n";
    std::istringstream rankfile(rankfile_text(node.cores));
    for (std::string line; std::getline(rankfile, line);) std::cout << "RANKFILE: " << line << "\n";
    print_dry_run(o, node);
    return 0;
  }
  const TempDir records;  // the rankfile, and what the shims record
  const std::string rankfile = records.path() + "/rankfile";
  if (!node.cores.empty()) {
    std::ofstream out(rankfile);
    out << rankfile_text(node.cores);
    ZT_CHECK(out.flush().good(), "cannot write the rankfile ", rankfile);
  }
  const std::vector<std::string> argv =
      mpirun_argv(o, node, mpirun, self_executable(), rankfile, as_root);
  SupervisorOptions so = supervisor_options(o);
  so.term_timeout_s = o.term_timeout_s + kMpirunExtraGraceS;
  Supervisor supervisor(so);
  for (int attempt = 0;; ++attempt) {
    check_port_free(o.master_port, attempt > 0 ? kRestartPortGraceS : 0);
    const std::string failure_file = records.path() + "/failure_" + std::to_string(attempt);
    const std::string groups_file = records.path() + "/groups_" + std::to_string(attempt);
    EnvMap env = node.env;
    env[zt::env::kMasterAddr] = o.master_addr;
    env[zt::env::kMasterPort] = std::to_string(o.master_port);
    env[kShimWorld] = std::to_string(o.world_size());
    env[kShimRestart] = std::to_string(attempt);
    env[kShimFailureFile] = failure_file;
    env[kShimGroupsFile] = groups_file;
    env[kShimLogDir] = o.log_dir;
    env[kShimRedirects] = std::to_string(o.redirects);
    env[kShimTermTimeout] = std::to_string(o.term_timeout_s);
    env[kShimMonitorInterval] = std::to_string(o.monitor_interval_s);
    ChildSpec spec;  // unlabelled: the shims label their ranks' lines
    spec.argv = argv;
    spec.envp = to_envp(env);
    ZT_LOG_INFO("starting ", rank_range(o), " of ", o.world_size(), " through ", mpirun,
                " (rendezvous ", o.master_addr, ":", o.master_port, ")",
                attempt > 0 ? ", restart " + std::to_string(attempt) : std::string());
    const GroupOutcome out = supervisor.run({spec});
    kill_rank_groups(groups_file);
    if (out.success) return 0;
    if (out.received_signal != 0) {
      ZT_LOG_ERROR("stopped by ", signal_name(out.received_signal),
                   o.stop_on_stdin_eof ? " or stdin EOF" : "", "; all ", o.nproc_per_node,
                   " local ranks were stopped");
      return 128 + out.received_signal;
    }
    std::string what = read_failure(o, failure_file);
    const bool named = !what.empty();
    if (!named) {
      what = "mpirun " + describe_exit(out.first_failure) +
             " before any rank failed on its own (a rank called MPI_Abort, or mpirun could not "
             "start the job: see the lines above)";
    }
    if (attempt < o.max_restarts) {
      ZT_LOG_WARN(what, "; restarting all ranks (restart ", attempt + 1, " of ", o.max_restarts,
                  ")");
      continue;
    }
    ZT_LOG_ERROR(what, "; stopped ", named ? "the other " : "all ",
                 o.nproc_per_node - (named ? 1 : 0), " local ranks",
                 o.max_restarts > 0 ? " after " + std::to_string(o.max_restarts) + " restarts"
                                    : std::string());
    return 1;
  }
}

namespace {

std::string take_var(EnvMap* env, const char* name) {
  auto it = env->find(name);
  ZT_CHECK(it != env->end(), "ztrun ", kMpiRankFlag, " is started by ztrun --transport mpi (", name,
           " is unset)");
  std::string value = it->second;
  env->erase(it);
  return value;
}

int env_int(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  ZT_CHECK(it != env.end(), "ztrun ", kMpiRankFlag, " runs under OpenMPI's mpirun (", name,
           " is unset)");
  size_t used = 0;
  int v = -1;
  try {
    v = std::stoi(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  ZT_CHECK(used > 0 && used == it->second.size(), name, " must be an integer, got '", it->second,
           "'");
  return v;
}

// One line per rank, appended in one write().
void append_group(const std::string& file, int pgid) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const std::string line = std::to_string(pgid) + "\n";
  [[maybe_unused]] ssize_t w = ::write(fd, line.data(), line.size());
  ::close(fd);
}

// O_EXCL: the first shim to record a failure is the one ztrun names.
void record_failure(const std::string& file, const RankIdentity& id, const ChildExit& e) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return;  // another rank failed first
  const std::string line = std::to_string(id.rank) + "\t" + std::to_string(id.local_rank) + "\t" +
                           describe_exit(e) + "\n";
  [[maybe_unused]] ssize_t w = ::write(fd, line.data(), line.size());
  ::close(fd);
}

}  // namespace

int run_mpi_rank(const std::vector<std::string>& program_and_args) {
  ZT_CHECK(!program_and_args.empty(), "ztrun ", kMpiRankFlag, " needs PROGRAM");
  // mpirun kills its processes when it dies, but not when it is SIGKILLed: the rank goes with it.
  const pid_t parent = ::getppid();
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) return 1;
  EnvMap env = current_environment();
  const int expected_world = std::stoi(take_var(&env, kShimWorld));
  RankIdentity id;
  id.restart_count = std::stoi(take_var(&env, kShimRestart));
  const std::string failure_file = take_var(&env, kShimFailureFile);
  const std::string groups_file = take_var(&env, kShimGroupsFile);
  LaunchOptions o;  // the parts of the launching ztrun's options a rank shim applies
  o.log_dir = take_var(&env, kShimLogDir);
  o.redirects = std::stoi(take_var(&env, kShimRedirects));
  o.term_timeout_s = std::stod(take_var(&env, kShimTermTimeout));
  o.monitor_interval_s = std::stod(take_var(&env, kShimMonitorInterval));
  id.rank = env_int(env, zt::env::kOmpiRank);
  id.world_size = env_int(env, zt::env::kOmpiSize);
  id.local_rank = env_int(env, zt::env::kOmpiLocalRank);
  id.local_world_size = env_int(env, zt::env::kOmpiLocalSize);
  ZT_CHECK(id.world_size == expected_world, "mpirun started ", id.world_size,
           " processes, ztrun asked for ", expected_world);
  ZT_CHECK(env.count(zt::env::kMasterAddr), "ztrun ", kMpiRankFlag, " is started by ztrun ",
           "--transport mpi (", zt::env::kMasterAddr, " is unset)");
  id.master_addr = env.at(zt::env::kMasterAddr);
  id.master_port = env_int(env, zt::env::kMasterPort);

  ChildSpec spec;
  spec.label = std::to_string(id.rank);
  spec.argv = program_and_args;
  spec.envp = to_envp(rank_environment(env, id));
  spec.log_path = rank_log_path(o, id.rank);
  spec.append_log = id.restart_count > 0;
  if (id.restart_count > 0) {
    spec.log_header = "=== ztrun: restart " + std::to_string(id.restart_count) + " (" +
                      zt::env::kRestartCount + "=" + std::to_string(id.restart_count) + ") ===";
  }
  // The launching ztrun speaks for the job: a shim's own notices ("forwarding SIGTERM", when
  // mpirun stops the job) would repeat once per rank.
  ::setenv("ZT_LOG_LEVEL", "error", 1);
  zt::log::reload_from_environment();
  SupervisorOptions so = supervisor_options(o);
  so.on_start = [&groups_file](int, int pid) { append_group(groups_file, pid); };
  Supervisor supervisor(so);
  const GroupOutcome out = supervisor.run({spec});
  if (out.success) return 0;
  if (out.first_failure.index >= 0) {
    record_failure(failure_file, id, out.first_failure);
    const ChildExit& e = out.first_failure;
    return e.signal != 0 ? 128 + e.signal : e.exit_code;
  }
  return out.received_signal != 0 ? 128 + out.received_signal : 1;
}

}  // namespace zt::launcher
