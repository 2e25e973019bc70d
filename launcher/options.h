#pragma once
// ztrun's command line: torchrun's flags and meanings, plus DeepSpeed's hostfile and
// --include/--exclude. parse_launch_options() validates everything that can be checked without
// touching the system (files, ports) and throws zt::Error with a one-line message naming the
// culprit flag and value.
//
//   ztrun [options] PROGRAM [ARGS...]
//
// The first token that is not an option (or the token after `--`) is the program; everything
// after it belongs to the program, so `ztrun --nproc-per-node 2 prog --nproc-per-node 7` gives
// the program its own flag. Flags may be spelt with `_` as torchrun accepts (`--nproc_per_node`).

#include <string>
#include <vector>

namespace zt::launcher {

inline constexpr int kDefaultMasterPort = 29500;  // torchrun's

// How this node's ranks are started (mpi_launch.h). kNative: ztrun forks them itself and gloo
// rendezvouses at MASTER_ADDR. kMpi: through OpenMPI's runtime (mpirun), so MPI_Init succeeds and
// `communication.backend: auto` resolves to mpi on CPU. kAuto: kMpi for a single-node CPU launch
// when mpirun is found, else kNative (resolve_transport()).
enum class Transport { kAuto, kNative, kMpi };

// torchrun's --rdzv-conf keys that an elastic launch (elastic_launch.h) reads, with its defaults.
struct RendezvousConf {
  double join_timeout_s = 600;       // fewer than MIN nodes for this long: the job ends
  double last_call_timeout_s = 30;   // first round: MIN nodes are in; wait this long for MAX
  double keep_alive_interval_s = 5;  // heartbeats between the ztruns and the rendezvous host
  int keep_alive_max_attempt = 3;    // heartbeats missed before a node counts as lost
};

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  // --nnodes MIN:MAX (torchrun's elastic form): the rendezvous (elastic_launch.h) decides node
  // ranks and the world size of each round; nnodes is then MAX.
  bool elastic = false;
  int min_nodes = 1;
  std::string rdzv_id = "none";  // --rdzv-id: the job's name; nodes of another job are refused
  RendezvousConf rdzv_conf;
  // Processes on every node when they differ (a hostfile with unequal slots); empty means
  // nnodes x nproc_per_node. When set, its size is nnodes and entry node_rank is nproc_per_node.
  std::vector<int> node_slots;
  // Empty: 127.0.0.1, or the first host of a hostfile.
  std::string master_addr;
  int master_port = kDefaultMasterPort;
  // Where the nodes' ztruns tell each other about failures (node_link.h), or where the elastic
  // rendezvous listens (--rdzv-endpoint's port); 0: master_port + 1.
  int launcher_port = 0;
  bool standalone = false;  // one node, a free port chosen by ztrun
  int max_restarts = 0;
  double monitor_interval_s = 0.1;  // longest sleep of the watch loop between checks
  double term_timeout_s = 5.0;      // SIGTERM -> SIGKILL grace period when tearing down
  std::string log_dir;              // empty: no log files
  int redirects = 0;                // torchrun's: bit 1 stdout, bit 2 stderr go to files only
  std::string hostfile;
  std::string include;  // DeepSpeed syntax: host1@host2:0,2
  std::string exclude;
  std::string ssh_command = "ssh";  // split on spaces; the host and the remote command follow
  bool dry_run = false;             // print what would run, run nothing
  bool stop_on_stdin_eof = false;   // set by the hostfile launcher on every node's ztrun
  std::vector<std::string> env;     // --env K=V, in order
  Transport transport = Transport::kAuto;
  std::string mpirun;  // --mpirun: OpenMPI's launcher; empty: mpirun on PATH, then the build's
  // DeepSpeed's --bind_cores_to_rank / --bind_core_list (core_binding.h): each local rank on its
  // own block of cores; the list ("" = every core ztrun may run on) is checked for syntax here,
  // against the machine when the node's ztrun plans the binding.
  bool bind_cores_to_rank = false;
  std::string bind_core_list;
  std::string program;
  std::vector<std::string> program_args;

  // Derived facts of the launch topology.
  int world_size() const;
  int rank_offset(int node) const;  // global rank of local rank 0 on `node`
  int local_world_size(int node) const;
};

// Parses argv[1..] (args excludes the program name of ztrun itself). Throws zt::Error on any bad
// input; never exits.
LaunchOptions parse_launch_options(const std::vector<std::string>& args);

// The usage text (ztrun --help).
std::string launch_usage();

// True when args asks for --help (checked before parsing so that `ztrun --help` needs no program).
bool wants_help(const std::vector<std::string>& args);

// "auto" | "native" | "mpi".
const char* transport_name(Transport t);

// Splits "K=V" into key and value; throws naming `flag` when the key is empty or '=' is missing.
std::pair<std::string, std::string> split_assignment(const std::string& text,
                                                     const std::string& flag);

}  // namespace zt::launcher
