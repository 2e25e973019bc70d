#include "launcher/elastic_launch.h"

#include "base/error.h"
#include "base/logging.h"
#include "launcher/elastic_rendezvous.h"
#include "launcher/local_launch.h"
#include "launcher/port.h"
#include "launcher/supervisor.h"

namespace zt::launcher {

int launch_elastic(const LaunchOptions& o) {
  ZT_INTERNAL_ASSERT(o.elastic && !o.master_addr.empty(), "not an elastic launch");
  const NodeSetup node = prepare_node(o);
  const int port = o.launcher_port > 0 ? o.launcher_port : o.master_port + 1;
  if (o.dry_run) {
    ZT_LOG_INFO("elastic: would join the rendezvous at ", o.master_addr, ":", port, " (",
                o.min_nodes, " to ", o.nnodes, " nodes); as node 0 of ", o.min_nodes, ":");
    LaunchOptions first = o;
    first.nnodes = o.min_nodes;
    print_dry_run(first, node);
    return 0;
  }
  const std::string id = agent_id();
  const std::unique_ptr<RendezvousHost> host = RendezvousHost::start(o, o.master_addr, port, id);
  RendezvousAgent agent(o, o.master_addr, port, id);
  ZT_LOG_INFO(host ? "hosting" : "joining", " the elastic rendezvous at ", o.master_addr, ":", port,
              " as ", id, " (", o.min_nodes, " to ", o.nnodes, " nodes, ", o.nproc_per_node,
              " ranks here)");
  SupervisorOptions so = supervisor_options(o);
  so.external_stop_fd = agent.stop_fd();
  Supervisor supervisor(so);
  for (;;) {
    const RoundAssignment a = agent.next([&] { return supervisor.received_signal() != 0; });
    switch (a.kind) {
      case RoundAssignment::Kind::kInterrupted:
        ZT_LOG_ERROR("stopped by ", signal_name(supervisor.received_signal()),
                     " while waiting for a round");
        return 128 + supervisor.received_signal();
      case RoundAssignment::Kind::kFinished:
        ZT_LOG_INFO("the elastic job finished on every node");
        return 0;
      case RoundAssignment::Kind::kEnded: ZT_LOG_ERROR("the elastic job ended: ", a.why); return 1;
      case RoundAssignment::Kind::kRound: break;
    }
    LaunchOptions r = o;
    r.elastic = false;
    r.node_slots = a.node_slots;
    r.nnodes = static_cast<int>(a.node_slots.size());
    r.node_rank = a.node_rank;
    r.nproc_per_node = a.node_slots[static_cast<size_t>(a.node_rank)];
    // Rank 0 hosts the store on node 0: a taken port would only show up as every rank timing out.
    if (r.node_rank == 0) check_port_free(o.master_port, a.round > 0 ? kRestartPortGraceS : 0);
    ZT_LOG_INFO("round ", a.round, ": starting ", rank_range(r), " of ", r.world_size(), " (node ",
                r.node_rank, " of ", r.nnodes, ", rendezvous ", o.master_addr, ":", o.master_port,
                ")");
    const GroupOutcome out = supervisor.run(rank_specs(r, node, a.round));
    if (out.received_signal != 0) {
      ZT_LOG_ERROR("stopped by ", signal_name(out.received_signal), "; all ", r.nproc_per_node,
                   " local ranks were stopped");
      return 128 + out.received_signal;
    }
    if (out.success) {
      agent.report_done(a.round);
    } else if (out.first_failure.index >= 0) {
      const std::string what = describe_rank_failure(r, out.first_failure);
      ZT_LOG_WARN(what, "; stopped the other local ranks, waiting for the next round");
      agent.report_failure(a.round, what);
    } else {
      ZT_LOG_WARN("round ", a.round, " stopped (", agent.stop_reason(), "); all ", r.nproc_per_node,
                  " local ranks were stopped, waiting for the next round");
    }
  }
}

}  // namespace zt::launcher
