#include "launcher/local_launch.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>
#include <unistd.h>

#include "base/env_vars.h"
#include "base/error.h"
#include "base/logging.h"
#include "launcher/node_link.h"
#include "launcher/port.h"
#include "launcher/remote_launch.h"

namespace zt::launcher {

std::string rank_range(const LaunchOptions& o) {
  const int first = o.rank_offset(o.node_rank);
  const int last = first + o.nproc_per_node - 1;
  return first == last ? "rank " + std::to_string(first)
                       : "ranks " + std::to_string(first) + ".." + std::to_string(last);
}

void print_dry_run(const LaunchOptions& o, const NodeSetup& node) {
  const char* keys[] = {zt::env::kRank,           zt::env::kLocalRank,    zt::env::kWorldSize,
                        zt::env::kLocalWorldSize, zt::env::kGroupRank,    zt::env::kMasterAddr,
                        zt::env::kMasterPort,     zt::env::kRestartCount, kOmpNumThreads};
  for (const ChildSpec& spec : rank_specs(o, node, 0)) {
    EnvMap env;
    for (const auto& kv : spec.envp) {
      const size_t eq = kv.find('=');
      env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    std::cout << "rank " << spec.label << ":";
    for (const char* k : keys) std::cout << " " << k << "=" << env[k];
    if (!spec.cores.cpus.empty()) std::cout << " cores=" << format_core_list(spec.cores.cpus);
    if (!spec.cores.memory_nodes.empty()) {
      std::cout << " numa=" << format_core_list(spec.cores.memory_nodes);
    }
    for (const auto& a : spec.argv) std::cout << " " << shell_quote(a);
    std::cout << "\n";
  }
  std::cout.flush();
}

namespace {

// Fails before anything starts when PROGRAM cannot be executed: one clear line instead of a
// failed group. Searches PATH like execvp does.
void check_program(const std::string& program) {
  auto executable = [](const std::string& p) {
    return ::access(p.c_str(), X_OK) == 0 && !std::filesystem::is_directory(p);
  };
  if (program.find('/') != std::string::npos) {
    ZT_CHECK(
        executable(program), "cannot execute PROGRAM ", program, ": ",
        std::filesystem::exists(program) ? "permission denied or a directory" : "no such file");
    return;
  }
  const char* path = ::zt::env::get(env::kPath);
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (executable((dir.empty() ? "." : dir) + "/" + program)) return;
  }
  ZT_THROW("cannot execute PROGRAM ", program, ": not found in PATH");
}

}  // namespace

std::string rank_log_path(const LaunchOptions& options, int rank) {
  if (options.log_dir.empty()) return "";
  return (std::filesystem::path(options.log_dir) / ("rank_" + std::to_string(rank) + ".log"))
      .string();
}

std::vector<ChildSpec> rank_specs(const LaunchOptions& o, const NodeSetup& node,
                                  int restart_count) {
  std::vector<ChildSpec> specs;
  std::vector<std::string> argv{o.program};
  argv.insert(argv.end(), o.program_args.begin(), o.program_args.end());
  for (int local = 0; local < o.nproc_per_node; ++local) {
    RankIdentity id;
    id.rank = o.rank_offset(o.node_rank) + local;
    id.local_rank = local;
    id.world_size = o.world_size();
    id.local_world_size = o.nproc_per_node;
    id.group_rank = o.node_rank;
    id.restart_count = restart_count;
    id.master_addr = o.master_addr;
    id.master_port = o.master_port;
    ChildSpec spec;
    spec.label = std::to_string(id.rank);
    spec.argv = argv;
    spec.envp = to_envp(rank_environment(node.env, id));
    if (!node.cores.empty()) spec.cores = node.cores[static_cast<size_t>(local)];
    spec.log_path = rank_log_path(o, id.rank);
    spec.append_log = restart_count > 0;
    if (restart_count > 0) {
      spec.log_header = "=== ztrun: restart " + std::to_string(restart_count) + " (" +
                        zt::env::kRestartCount + "=" + std::to_string(restart_count) + ") ===";
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::string describe_rank_failure(const LaunchOptions& o, const ChildExit& f) {
  const int rank = o.rank_offset(o.node_rank) + f.index;
  std::string what = "rank " + std::to_string(rank) + " (local rank " + std::to_string(f.index) +
                     ") " + describe_exit(f);
  const std::string log = rank_log_path(o, rank);
  if (!log.empty()) what += ", log " + log;
  return what;
}

SupervisorOptions supervisor_options(const LaunchOptions& o) {
  SupervisorOptions so;
  so.monitor_interval_s = o.monitor_interval_s;
  so.term_timeout_s = o.term_timeout_s;
  so.stdout_to_console = (o.redirects & 1) == 0;
  so.stderr_to_console = (o.redirects & 2) == 0;
  so.stop_on_stdin_eof = o.stop_on_stdin_eof;
  return so;
}

namespace {

SupervisorOptions supervisor_options(const LaunchOptions& o, NodeLink* link) {
  SupervisorOptions so = supervisor_options(o);
  if (link) {
    so.external_stop_fd = link->stop_fd();
    // Told at the moment of the failure, not after the local teardown's grace period.
    so.on_first_failure = [&o, link](const ChildExit& e) {
      const int rank = o.rank_offset(o.node_rank) + e.index;
      link->report_failure("rank " + std::to_string(rank) + " " + describe_exit(e) + " on node " +
                           std::to_string(o.node_rank));
    };
  }
  return so;
}

// "rank 2 (local rank 2) exited with code 3, log DIR/rank_2.log" or "another node failed: ...".
std::string describe_failure(const LaunchOptions& o, const GroupOutcome& out,
                             const NodeLink* link) {
  if (out.first_failure.index < 0) {
    ZT_INTERNAL_ASSERT(out.external_stop && link, "a failed group without a cause");
    return "another node failed: " + link->peer_failure();
  }
  return describe_rank_failure(o, out.first_failure);
}

// --bind-cores-to-rank: the plan for this node's ranks, and OMP_NUM_THREADS to match it.
std::vector<RankCores> plan_node_binding(const LaunchOptions& o, bool omp_from_ztrun,
                                         EnvMap* node_env) {
  std::vector<RankCores> plan =
      plan_core_binding(read_cpu_layout(), o.bind_core_list, o.nproc_per_node);
  const bool numa = std::any_of(plan.begin(), plan.end(),
                                [](const RankCores& rc) { return !rc.memory_nodes.empty(); });
  if (numa) {
    // As DeepSpeed does when numactl may not set a memory policy: cores only.
    const std::string why = memory_policy_error(plan);
    if (!why.empty()) {
      ZT_LOG_WARN("--bind-cores-to-rank: this process may not set a NUMA memory policy (", why,
                  "); binding cores only");
      for (RankCores& rc : plan) rc.memory_nodes.clear();
    }
  }
  // ztrun's own default (cores / local ranks) gives way to the plan's count like any inherited
  // value; only --env's stays.
  if (omp_from_ztrun) node_env->erase(kOmpNumThreads);
  const std::string note =
      apply_binding_environment(node_env, o.env, static_cast<int>(plan.front().cpus.size()));
  if (!o.dry_run) {
    ZT_LOG_INFO("--bind-cores-to-rank: ", describe_plan(plan), "; ", kOmpNumThreads, "=",
                node_env->at(kOmpNumThreads), note.empty() ? "" : " (" + note + ")");
  }
  return plan;
}

}  // namespace

NodeSetup prepare_node(const LaunchOptions& o) {
  bool omp_set = false;
  const int cores = usable_cores();
  NodeSetup node;
  node.env = node_environment(current_environment(), env_file_paths(), o.env, o.nproc_per_node,
                              cores, &omp_set);
  check_program(o.program);
  if (o.bind_cores_to_rank) {
    node.cores = plan_node_binding(o, omp_set, &node.env);
  } else if (omp_set && !o.dry_run) {
    ZT_LOG_INFO(kOmpNumThreads, " is unset; each rank gets ", node.env.at(kOmpNumThreads),
                " threads (", cores, " cores / ", o.nproc_per_node, " local ranks)");
  }
  if (!o.log_dir.empty() && !o.dry_run) {
    std::error_code ec;
    std::filesystem::create_directories(o.log_dir, ec);
    ZT_CHECK(!ec, "cannot create --log-dir ", o.log_dir, ": ", ec.message());
  }
  return node;
}

int launch_local(const LaunchOptions& o) {
  ZT_INTERNAL_ASSERT(!o.master_addr.empty() && o.master_port > 0, "unresolved master address");
  const NodeSetup node = prepare_node(o);
  if (o.dry_run) {
    print_dry_run(o, node);
    return 0;
  }
  // Several nodes: a failure anywhere stops (and restarts) every node's ranks.
  std::unique_ptr<NodeLink> link;
  if (o.nnodes > 1) {
    const int port = o.launcher_port > 0 ? o.launcher_port : o.master_port + 1;
    link = std::make_unique<NodeLink>(o.node_rank, o.nnodes, o.master_addr, port);
  }
  Supervisor supervisor(supervisor_options(o, link.get()));
  for (int attempt = 0;; ++attempt) {
    if (link) link->begin_attempt(attempt);
    // Rank 0 hosts the store on node 0: a taken port would only show up as every rank timing out.
    if (o.node_rank == 0) check_port_free(o.master_port, attempt > 0 ? kRestartPortGraceS : 0);
    ZT_LOG_INFO("starting ", rank_range(o), " of ", o.world_size(), " (node ", o.node_rank, " of ",
                o.nnodes, ", rendezvous ", o.master_addr, ":", o.master_port, ")",
                attempt > 0 ? ", restart " + std::to_string(attempt) : std::string());
    const GroupOutcome out = supervisor.run(rank_specs(o, node, attempt));
    if (out.success) {
      if (link) link->report_done();
      return 0;
    }
    if (out.received_signal != 0) {
      ZT_LOG_ERROR("stopped by ", signal_name(out.received_signal),
                   o.stop_on_stdin_eof ? " or stdin EOF" : "", "; all ", o.nproc_per_node,
                   " local ranks were stopped");
      return 128 + out.received_signal;
    }
    const std::string what = describe_failure(o, out, link.get());
    if (attempt < o.max_restarts) {
      ZT_LOG_WARN(what, "; restarting all ranks (restart ", attempt + 1, " of ", o.max_restarts,
                  ")");
      continue;
    }
    const bool local = out.first_failure.index >= 0;
    ZT_LOG_ERROR(what, "; stopped ", local ? "the other " : "all ",
                 o.nproc_per_node - (local ? 1 : 0), " local ranks",
                 o.max_restarts > 0 ? " after " + std::to_string(o.max_restarts) + " restarts"
                                    : std::string());
    return 1;
  }
}

}  // namespace zt::launcher
