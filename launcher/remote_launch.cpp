#include "launcher/remote_launch.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <poll.h>
#include <sstream>
#include <unistd.h>

#include "base/error.h"
#include "base/logging.h"
#include "launcher/node_link.h"
#include "launcher/rank_env.h"
#include "launcher/supervisor.h"

namespace zt::launcher {
namespace {

std::string join_ints(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out;
}

std::string format_double(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

}  // namespace

std::string shell_quote(const std::string& s) {
  const bool safe = !s.empty() && s.find_first_not_of(
                                      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                      "0123456789_-./:=,@%+") == std::string::npos;
  if (safe) return s;
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::vector<NodeCommand> node_commands(const LaunchOptions& o,
                                       const std::vector<NodeAssignment>& nodes,
                                       const std::string& ztrun_path, const std::string& cwd) {
  std::vector<int> slots;
  for (const auto& n : nodes) slots.push_back(static_cast<int>(n.slots.size()));
  const bool uneven = std::any_of(slots.begin(), slots.end(), [&](int s) { return s != slots[0]; });
  const std::string master_addr = o.master_addr.empty() ? nodes.front().host : o.master_addr;
  std::vector<NodeCommand> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::vector<std::string> args{
        ztrun_path,
        "--nnodes=" + std::to_string(nodes.size()),
        "--node-rank=" + std::to_string(i),
        "--nproc-per-node=" + std::to_string(slots[i]),
        "--master-addr=" + master_addr,
        "--master-port=" + std::to_string(o.master_port),
        "--launcher-port=" +
            std::to_string(o.launcher_port > 0 ? o.launcher_port : o.master_port + 1),
        "--max-restarts=" + std::to_string(o.max_restarts),
        "--monitor-interval=" + format_double(o.monitor_interval_s),
        "--term-timeout=" + format_double(o.term_timeout_s),
        "--stop-on-stdin-eof"};
    if (uneven) args.push_back("--node-slots=" + join_ints(slots));
    if (!o.log_dir.empty()) args.push_back("--log-dir=" + o.log_dir);
    if (o.redirects != 0) args.push_back("--redirects=" + std::to_string(o.redirects));
    for (const auto& e : o.env) args.push_back("--env=" + e);
    // Every node's ztrun plans its own ranks' cores, from its own machine (as DeepSpeed passes the
    // flags to each node's launch.py).
    if (o.bind_cores_to_rank) args.push_back("--bind-cores-to-rank");
    if (!o.bind_core_list.empty()) args.push_back("--bind-core-list=" + o.bind_core_list);
    // A filtered node runs on the slots it kept, as DeepSpeed does with CUDA_VISIBLE_DEVICES.
    const NodeAssignment& n = nodes[i];
    if (static_cast<int>(n.slots.size()) != n.slots.back() + 1) {
      args.push_back("--env=CUDA_VISIBLE_DEVICES=" + join_ints(n.slots));
    }
    args.push_back("--");
    args.push_back(o.program);
    args.insert(args.end(), o.program_args.begin(), o.program_args.end());
    std::string remote = "cd " + shell_quote(cwd) + " &&";
    for (const auto& a : args) remote += " " + shell_quote(a);
    NodeCommand cmd;
    cmd.host = n.host;
    cmd.argv = split_words(o.ssh_command);
    cmd.argv.push_back(n.host);
    cmd.argv.push_back(remote);
    cmd.remote_command = remote;
    out.push_back(std::move(cmd));
  }
  return out;
}

namespace {

void print_commands(const std::vector<NodeCommand>& cmds) {
  for (const auto& c : cmds) {
    for (size_t i = 0; i < c.argv.size(); ++i) {
      std::cout << (i ? " " : "") << (i + 1 == c.argv.size() ? shell_quote(c.argv[i]) : c.argv[i]);
    }
    std::cout << "\n";
  }
  std::cout.flush();
}

std::vector<ChildSpec> node_specs(const std::vector<NodeCommand>& cmds) {
  std::vector<ChildSpec> specs;
  const std::vector<std::string> envp = to_envp(current_environment());
  for (const auto& c : cmds) {
    ChildSpec spec;
    spec.label = c.host;
    spec.argv = c.argv;
    spec.envp = envp;
    // ssh forwards this pipe to the remote ztrun's stdin: when this ztrun stops a node or dies,
    // the EOF reaches the remote side even though signals to the local ssh client do not.
    spec.stdin_pipe = true;
    specs.push_back(std::move(spec));
  }
  return specs;
}

// The host of a NodeLink report ("... on node 1"), or "" when it names none.
std::string reported_host(const std::string& report, const std::vector<NodeAssignment>& nodes) {
  const size_t at = report.rfind(" on node ");
  if (at == std::string::npos) return "";
  const int node = std::atoi(report.c_str() + at + 9);
  return node >= 0 && node < static_cast<int>(nodes.size()) ? nodes[node].host : "";
}

}  // namespace

std::vector<std::string> forwarded_env(const std::vector<std::string>& given,
                                       const char* const* envp) {
  auto name_of = [](const std::string& kv) { return kv.substr(0, kv.find('=')); };
  std::vector<std::string> out;
  for (const char* const* e = envp; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    const std::string name = name_of(kv);
    if (name.rfind("NCCL_", 0) != 0 && name.rfind("GLOO_", 0) != 0) continue;
    const bool overridden = std::any_of(given.begin(), given.end(),
                                        [&](const std::string& g) { return name_of(g) == name; });
    if (!overridden) out.push_back(kv);
  }
  std::sort(out.begin(), out.end());
  return out;
}

int launch_remote(const LaunchOptions& options, const std::vector<NodeAssignment>& nodes) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string cwd = std::filesystem::current_path().string();
  LaunchOptions o = options;
  std::vector<std::string> env = forwarded_env(o.env, environ);
  env.insert(env.end(), o.env.begin(), o.env.end());
  o.env = std::move(env);
  const std::vector<NodeCommand> cmds = node_commands(o, nodes, self, cwd);
  if (o.dry_run) {
    print_commands(cmds);
    return 0;
  }
  SupervisorOptions sup_options;
  sup_options.monitor_interval_s = o.monitor_interval_s;
  sup_options.term_timeout_s = o.term_timeout_s;
  Supervisor supervisor(sup_options);
  const std::string master_addr = o.master_addr.empty() ? nodes.front().host : o.master_addr;
  // Listens to the nodes' link, so that the last line names the failed rank, not just a node.
  NodeLink observer(-1, static_cast<int>(nodes.size()), master_addr,
                    o.launcher_port > 0 ? o.launcher_port : o.master_port + 1);
  ZT_LOG_INFO("starting ", cmds.size(), " nodes through '", o.ssh_command, "', rendezvous ",
              master_addr, ":", o.master_port);
  const GroupOutcome out = supervisor.run(node_specs(cmds));
  if (out.success) return 0;
  if (out.received_signal != 0) {
    ZT_LOG_ERROR("stopped by ", signal_name(out.received_signal),
                 "; all node launchers were stopped");
    return 128 + out.received_signal;
  }
  pollfd p{observer.stop_fd(), POLLIN, 0};
  if (::poll(&p, 1, 1000) == 1) {  // the report travels beside the node's exit: allow 1 s
    const std::string report = observer.peer_failure();
    const std::string host = reported_host(report, nodes);
    ZT_LOG_ERROR(report, host.empty() ? "" : " (" + host + ")", "; stopped all ", nodes.size(),
                 " nodes");
  } else {
    const ChildExit& f = out.first_failure;
    ZT_LOG_ERROR("node ", f.index, " (", nodes[f.index].host, ") ", describe_exit(f),
                 "; stopped the other ", nodes.size() - 1, " nodes");
  }
  return 1;
}

}  // namespace zt::launcher
