// ztrun: starts PROGRAM as N ranks on this node (or on every node of a hostfile), gives each the
// launch environment, relays their output and stops them all when one fails.
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/logging.h"
#include "base/main_guard.h"
#include "launcher/dump_request.h"
#include "launcher/elastic_launch.h"
#include "launcher/hostfile.h"
#include "launcher/local_launch.h"
#include "launcher/mpi_launch.h"
#include "launcher/options.h"
#include "launcher/port.h"
#include "launcher/remote_launch.h"

namespace {

int ztrun(const std::vector<std::string>& args) {
  using namespace zt::launcher;
  // ztrun may itself run inside a launch (RANK set); its own messages are not a rank's.
  zt::set_process_rank(-1);
  if (!args.empty() && args.front() == kMpiRankFlag) {
    return run_mpi_rank(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  if (!args.empty() && args.front() == "--dump") {
    ZT_CHECK(args.size() == 2, "usage: ztrun --dump PID (the pid of a running ztrun)");
    return request_dump(args[1]);
  }
  if (wants_help(args)) {
    std::cout << launch_usage();
    return 0;
  }
  LaunchOptions o = parse_launch_options(args);
  if (!o.hostfile.empty()) {
    const std::vector<NodeAssignment> nodes =
        filter_hosts(read_hostfile(o.hostfile), o.include, o.exclude);
    if (nodes.size() > 1) return launch_remote(o, nodes);
    // One node: run here, without ssh, on the slots it kept.
    const NodeAssignment& node = nodes.front();
    o.nproc_per_node = static_cast<int>(node.slots.size());
    if (node.slots.back() + 1 != o.nproc_per_node) {
      std::string list;
      for (int s : node.slots) list += (list.empty() ? "" : ",") + std::to_string(s);
      o.env.push_back("CUDA_VISIBLE_DEVICES=" + list);
    }
  }
  // Held until the job ends, so that no other launcher on this host draws the port meanwhile.
  std::optional<PortReservation> standalone_port;
  if (o.standalone) {
    standalone_port.emplace(PortReservation::draw());
    o.master_addr = "127.0.0.1";
    o.master_port = standalone_port->port();
  }
  if (o.master_addr.empty()) o.master_addr = "127.0.0.1";
  if (o.elastic) return launch_elastic(o);
  const TransportChoice choice = resolve_transport(o);
  if (choice.transport == Transport::kMpi) return launch_mpi(o, choice.mpirun);
  if (o.transport == Transport::kAuto && o.nnodes == 1 &&
      choice.reason.rfind("no OpenMPI", 0) == 0) {
    ZT_LOG_INFO("--transport auto: starting the ranks natively, ", choice.reason,
                "; communication.backend auto will be gloo on CPU");
  }
  return launch_local(o);
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_main("ztrun",
                      [&] { return ztrun(std::vector<std::string>(argv + 1, argv + argc)); });
}
