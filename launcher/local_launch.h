#pragma once
// Runs this node's ranks: builds each rank's command and environment, checks the rendezvous port
// (node 0), supervises the group and restarts it after a failure up to --max-restarts times.
// With several nodes, the nodes' ztruns are joined by a NodeLink (node_link.h): a failure on any
// node stops the ranks of every node, and every node restarts (or gives up) in the same round.

#include <string>
#include <vector>

#include "launcher/options.h"
#include "launcher/rank_env.h"
#include "launcher/supervisor.h"

namespace zt::launcher {

// What both transports start every attempt from (prepare_node()).
struct NodeSetup {
  EnvMap env;                    // the common part of every rank's environment
  std::vector<RankCores> cores;  // per local rank with --bind-cores-to-rank, else empty
};

// The children of one attempt on this node. Ranks are node-major: rank = rank_offset(node_rank)
// + local_rank. Log files are <log_dir>/rank_<rank>.log, truncated on the first attempt and
// appended to on restarts.
std::vector<ChildSpec> rank_specs(const LaunchOptions& options, const NodeSetup& node,
                                  int restart_count);

// Log file of a rank ("" without --log-dir).
std::string rank_log_path(const LaunchOptions& options, int rank);

// Everything before the first start, shared by both transports: the common part of every rank's
// environment (env files, --env, OMP_NUM_THREADS), the core binding planned (--bind-cores-to-rank:
// OMP_NUM_THREADS then follows the plan, core_binding.h), PROGRAM checked, --log-dir created.
NodeSetup prepare_node(const LaunchOptions& options);

// The supervisor settings --monitor-interval, --term-timeout, --redirects and
// --stop-on-stdin-eof ask for.
SupervisorOptions supervisor_options(const LaunchOptions& options);

// --dry-run: one line per rank, its launch variables, its cores (with --bind-cores-to-rank) and
// command.
void print_dry_run(const LaunchOptions& options, const NodeSetup& node);

// "rank 2 (local rank 2) exited with code 3, log DIR/rank_2.log": a rank of this node that failed
// on its own.
std::string describe_rank_failure(const LaunchOptions& options, const ChildExit& failure);

// "ranks 0..3" or "rank 2": this node's ranks.
std::string rank_range(const LaunchOptions& options);

// The whole local launch with ztrun's own processes (--transport native); returns ztrun's exit
// code: 0 when every rank exited 0, 1 after a failure with no restarts left, 128+signal when ztrun
// was told to stop. `options` must have master_addr and master_port resolved.
int launch_local(const LaunchOptions& options);

}  // namespace zt::launcher
