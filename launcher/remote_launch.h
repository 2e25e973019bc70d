#pragma once
// Multi-node launch from a hostfile: one ztrun per node, started through --ssh-command
// (`ssh HOST 'cd CWD && ztrun --nnodes N --node-rank i ... -- PROGRAM ARGS'`), each supervised
// like a rank: when one node's ztrun fails, the others are stopped. Node 0 is the hostfile's first
// (kept) host and, unless --master-addr says otherwise, the rendezvous address. The remote ztrun
// is this binary's path on the same filesystem layout, and the working directory is the same.

#include <string>
#include <vector>

#include "launcher/hostfile.h"
#include "launcher/options.h"

namespace zt::launcher {

struct NodeCommand {
  std::string host;
  std::vector<std::string> argv;  // the ssh command line, ready for exec
  std::string remote_command;     // the shell command run on the host
};

// Single-quotes `s` for a POSIX shell when it holds anything but safe characters.
std::string shell_quote(const std::string& s);

// One command per node. `ztrun_path` and `cwd` are as seen on every node.
std::vector<NodeCommand> node_commands(const LaunchOptions& options,
                                       const std::vector<NodeAssignment>& nodes,
                                       const std::string& ztrun_path, const std::string& cwd);

// The launching shell's variables every node's ranks get as well, as `--env=K=V` arguments of
// the node commands: names starting NCCL_ or GLOO_ (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, ...),
// as DeepSpeed's runner forwards its EXPORT_ENVS prefixes (deepspeed/launcher/runner.py); one
// that `given` (--env) already sets is left to it. `envp`: a null-terminated K=V list.
std::vector<std::string> forwarded_env(const std::vector<std::string>& given,
                                       const char* const* envp);

// Starts and watches the node commands (or prints them with --dry-run); returns ztrun's exit
// code as launch_local() does.
int launch_remote(const LaunchOptions& options, const std::vector<NodeAssignment>& nodes);

}  // namespace zt::launcher
