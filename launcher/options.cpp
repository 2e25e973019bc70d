#include "launcher/options.h"

#include <boost/program_options.hpp>
#include <limits>
#include <numeric>
#include <sstream>

#include "base/error.h"
#include "launcher/core_binding.h"

namespace zt::launcher {
namespace po = boost::program_options;

namespace {

po::options_description make_description() {
  po::options_description d("ztrun [options] PROGRAM [ARGS...]");
  // Defaults are shown by launch_usage(); the values land in a LaunchOptions below.
  d.add_options()                                                                 //
      ("help,h", "print this help")                                               //
      ("nproc-per-node", po::value<int>(), "processes on this node (default 1)")  //
      ("nnodes", po::value<std::string>(),
       "number of nodes (default 1), or MIN:MAX for an elastic job whose nodes may leave and "
       "join")                                                                       //
      ("node-rank", po::value<int>(), "rank of this node, 0..nnodes-1 (default 0)")  //
      ("node-slots", po::value<std::string>(),
       "processes of every node when they differ, e.g. 2,2,4 (set by the hostfile launcher)")    //
      ("master-addr", po::value<std::string>(), "address of rank 0's node (default 127.0.0.1)")  //
      ("master-port", po::value<int>(), "rendezvous port on the master (default 29500)")         //
      ("launcher-port", po::value<int>(),
       "port on the master where the nodes' ztruns report failures (default master port + 1)")  //
      ("rdzv-endpoint", po::value<std::string>(),
       "HOST[:PORT] of an elastic job's rendezvous, on the node that hosts rank 0 (default "
       "--master-addr and --launcher-port; PORT defaults to 29400)")  //
      ("rdzv-backend", po::value<std::string>(),
       "c10d (the ztruns' own rendezvous; torchrun's name) or static (--nnodes N)")        //
      ("rdzv-id", po::value<std::string>(), "job name; nodes of another job are refused")  //
      ("rdzv-conf", po::value<std::string>(),
       "K=V,... of join_timeout (600), last_call_timeout (30), keep_alive_interval (5), "
       "keep_alive_max_attempt (3)")                                                  //
      ("standalone", po::bool_switch(), "single node on 127.0.0.1 with a free port")  //
      ("max-restarts", po::value<int>(),
       "restart the whole group up to K times after a failure")  //
      ("monitor-interval", po::value<double>(),
       "seconds between checks of the ranks (default 0.1)")  //
      ("term-timeout", po::value<double>(),
       "seconds between SIGTERM and SIGKILL when stopping the ranks (default 5)")    //
      ("log-dir", po::value<std::string>(), "write one log file per rank into DIR")  //
      ("redirects", po::value<int>(),
       "with --log-dir, streams that go to the files only: 0 none, 1 stdout, 2 stderr, 3 both")  //
      ("hostfile", po::value<std::string>(), "DeepSpeed hostfile: `host slots=N` lines")         //
      ("include", po::value<std::string>(), "hosts/slots to use, e.g. host1@host2:0,2")          //
      ("exclude", po::value<std::string>(), "hosts/slots to leave out, e.g. host1:1")            //
      ("ssh-command", po::value<std::string>(),
       "command that runs a command on a host, given host then command (default ssh)")    //
      ("dry-run", po::bool_switch(), "print the commands and environments, run nothing")  //
      ("stop-on-stdin-eof", po::bool_switch(),
       "stop the ranks when stdin reaches EOF (the hostfile launcher sets it on each node)")  //
      ("env", po::value<std::vector<std::string>>()->composing(),
       "K=V added to every rank's environment (repeatable)")  //
      ("transport", po::value<std::string>(),
       "how the ranks start: native (ztrun forks them; backend auto = gloo on CPU), mpi (through "
       "OpenMPI's mpirun; backend auto = mpi), auto (default: mpi for one node without a GPU "
       "when mpirun is found, else native)")  //
      ("mpirun", po::value<std::string>(),
       "OpenMPI launcher for --transport mpi (default: mpirun on PATH, then the one found at "
       "build time)")  //
      ("bind-cores-to-rank", po::bool_switch(),
       "pin each local rank to its own block of cores (cores / local ranks each, and its NUMA "
       "node's memory when there are several nodes) with OMP_NUM_THREADS to match; DeepSpeed's "
       "--bind_cores_to_rank")  //
      ("bind-core-list", po::value<std::string>(),
       "with --bind-cores-to-rank: the cores to share out, e.g. 0-27,56-83 (default: every core "
       "ztrun may run on, one thread per physical core)");
  return d;
}

// torchrun accepts --nproc_per_node as well as --nproc-per-node.
std::string normalize_flag(const std::string& token) {
  if (token.rfind("--", 0) != 0) return token;
  std::string out = token;
  const size_t end = std::min(out.find('='), out.size());
  for (size_t i = 2; i < end; ++i) {
    if (out[i] == '_') out[i] = '-';
  }
  return out;
}

struct SplitArgs {
  std::vector<std::string> launcher;  // each as --name or --name=value
  std::vector<std::string> program;   // program and its arguments
};

// Finds where the program starts. Boost would happily take a program's own flags as ours, so the
// split is done here, with the option table saying which flags take a value.
SplitArgs split_args(const std::vector<std::string>& args, const po::options_description& desc) {
  SplitArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& raw = args[i];
    if (raw == "--") {
      out.program.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      return out;
    }
    if (raw.size() < 2 || raw[0] != '-') {
      out.program.assign(args.begin() + static_cast<long>(i), args.end());
      return out;
    }
    const std::string token = normalize_flag(raw);
    const bool is_long = token.rfind("--", 0) == 0;
    const size_t eq = token.find('=');
    const std::string name =
        is_long ? token.substr(2, eq == std::string::npos ? std::string::npos : eq - 2)
                : token.substr(0, 2);  // boost matches short names with their dash
    const po::option_description* opt =
        desc.find_nothrow(name, /*approx=*/false, /*long_ignore_case=*/false,
                          /*short_ignore_case=*/false);
    ZT_CHECK(opt != nullptr, "unknown option ", raw, " (see ztrun --help)");
    const bool takes_value = opt->semantic()->max_tokens() > 0;
    const std::string canonical = "--" + opt->long_name();
    if (!takes_value) {
      ZT_CHECK(eq == std::string::npos, "option ", canonical, " takes no value, got ", raw);
      ZT_CHECK(is_long || token.size() == 2, "unknown option ", raw, " (see ztrun --help)");
      out.launcher.push_back(canonical);
      continue;
    }
    if (eq != std::string::npos) {
      out.launcher.push_back(canonical + "=" + token.substr(eq + 1));
    } else if (!is_long && token.size() > 2) {
      out.launcher.push_back(canonical + "=" + token.substr(2));
    } else {
      ZT_CHECK(i + 1 < args.size(), "option ", canonical, " needs a value");
      out.launcher.push_back(canonical + "=" + args[++i]);
    }
  }
  return out;
}

std::vector<int> parse_int_list(const std::string& text, const std::string& flag) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    ZT_CHECK(!item.empty() && used == item.size(), flag, " must be comma-separated integers, got '",
             text, "'");
    out.push_back(v);
  }
  ZT_CHECK(!out.empty(), flag, " must not be empty");
  return out;
}

Transport parse_transport(const std::string& text) {
  if (text == "auto") return Transport::kAuto;
  if (text == "native") return Transport::kNative;
  if (text == "mpi") return Transport::kMpi;
  ZT_THROW("--transport must be auto, native or mpi, got '", text, "'");
}

// "4" or "2:4" (torchrun's elastic form; "4:4" is elastic too). A plain number below 1 is left
// for validate() to name.
void parse_nnodes(const std::string& text, LaunchOptions* o) {
  const auto colon = text.find(':');
  auto number = [&](const std::string& part, int least) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(part, &used);
    } catch (const std::exception&) {
      used = std::string::npos;
    }
    ZT_CHECK(used == part.size() && v >= least,
             "--nnodes must be N or MIN:MAX with 1 <= MIN <= MAX, got '", text, "'");
    return v;
  };
  if (colon == std::string::npos) {
    o->nnodes = number(text, std::numeric_limits<int>::min());
    return;
  }
  o->elastic = true;
  o->min_nodes = number(text.substr(0, colon), 1);
  o->nnodes = number(text.substr(colon + 1), 1);
  ZT_CHECK(o->min_nodes <= o->nnodes, "--nnodes must be N or MIN:MAX with 1 <= MIN <= MAX, got '",
           text, "'");
}

// torchrun's default rendezvous port.
constexpr int kDefaultRendezvousPort = 29400;

// "HOST[:PORT]": the rendezvous runs in the ztrun on HOST, which also hosts rank 0.
void parse_endpoint(const std::string& text, LaunchOptions* o) {
  const auto colon = text.rfind(':');
  const std::string host = colon == std::string::npos ? text : text.substr(0, colon);
  int port = kDefaultRendezvousPort;
  if (colon != std::string::npos) {
    size_t used = 0;
    try {
      port = std::stoi(text.substr(colon + 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    ZT_CHECK(used == text.size() - colon - 1 && used > 0 && port >= 1 && port <= 65535,
             "--rdzv-endpoint must be HOST[:PORT] with PORT in [1, 65535], got '", text, "'");
  }
  ZT_CHECK(!host.empty(), "--rdzv-endpoint must be HOST[:PORT], got '", text, "'");
  o->master_addr = host;
  o->launcher_port = port;
}

void parse_rdzv_conf(const std::string& text, RendezvousConf* c) {
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const auto [key, value] = split_assignment(item, "--rdzv-conf");
    double v = 0;
    size_t used = 0;
    try {
      v = std::stod(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    ZT_CHECK(used == value.size() && used > 0 && v > 0, "--rdzv-conf ", key,
             " must be a positive number, got '", value, "'");
    if (key == "join_timeout") {
      c->join_timeout_s = v;
    } else if (key == "last_call_timeout") {
      c->last_call_timeout_s = v;
    } else if (key == "keep_alive_interval") {
      c->keep_alive_interval_s = v;
    } else if (key == "keep_alive_max_attempt") {
      ZT_CHECK(v == static_cast<int>(v), "--rdzv-conf keep_alive_max_attempt must be an integer");
      c->keep_alive_max_attempt = static_cast<int>(v);
    } else {
      ZT_THROW("--rdzv-conf: unknown key '", key,
               "' (known: join_timeout, last_call_timeout, keep_alive_interval, "
               "keep_alive_max_attempt)");
    }
  }
}

template <typename T>
void take(const po::variables_map& vm, const char* name, T* field) {
  if (vm.count(name)) *field = vm[name].as<T>();
}

void validate(const LaunchOptions& o, const po::variables_map& vm) {
  ZT_CHECK(!o.program.empty(),
           "missing PROGRAM to launch (usage: ztrun [options] PROGRAM [ARGS...])");
  ZT_CHECK(o.nproc_per_node >= 1, "--nproc-per-node must be >= 1, got ", o.nproc_per_node);
  ZT_CHECK(o.nnodes >= 1, "--nnodes must be >= 1, got ", o.nnodes);
  ZT_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes, "--node-rank must be in [0, ", o.nnodes,
           "), got ", o.node_rank);
  ZT_CHECK(o.master_port >= 1 && o.master_port <= 65535,
           "--master-port must be in [1, 65535], got ", o.master_port);
  ZT_CHECK(!vm.count("master-addr") || !o.master_addr.empty(), "--master-addr must not be empty");
  ZT_CHECK(!vm.count("launcher-port") || (o.launcher_port >= 1 && o.launcher_port <= 65535),
           "--launcher-port must be in [1, 65535], got ", o.launcher_port);
  ZT_CHECK(o.max_restarts >= 0, "--max-restarts must be >= 0, got ", o.max_restarts);
  ZT_CHECK(o.monitor_interval_s > 0, "--monitor-interval must be > 0, got ", o.monitor_interval_s);
  ZT_CHECK(o.term_timeout_s >= 0, "--term-timeout must be >= 0, got ", o.term_timeout_s);
  ZT_CHECK(o.redirects >= 0 && o.redirects <= 3, "--redirects must be 0..3, got ", o.redirects);
  ZT_CHECK(o.redirects == 0 || !o.log_dir.empty(), "--redirects ", o.redirects,
           " needs --log-dir (the redirected streams would go nowhere)");
  ZT_CHECK(o.include.empty() || o.exclude.empty(),
           "--include and --exclude are mutually exclusive");
  ZT_CHECK(!o.hostfile.empty() || (o.include.empty() && o.exclude.empty()),
           "--include/--exclude need --hostfile");
  if (o.standalone) {
    ZT_CHECK(o.nnodes == 1, "--standalone is single-node, got --nnodes ", o.nnodes);
    ZT_CHECK(!vm.count("master-addr") && !vm.count("master-port"),
             "--standalone chooses the address and port itself; drop --master-addr/--master-port");
    ZT_CHECK(o.hostfile.empty(), "--standalone and --hostfile are mutually exclusive");
  }
  if (!o.hostfile.empty()) {
    ZT_CHECK(!vm.count("nnodes") && !vm.count("node-rank") && !vm.count("nproc-per-node") &&
                 !vm.count("node-slots"),
             "--hostfile decides nodes and processes; drop --nnodes/--node-rank/--nproc-per-node");
  }
  if (!o.node_slots.empty()) {
    ZT_CHECK(static_cast<int>(o.node_slots.size()) == o.nnodes, "--node-slots has ",
             o.node_slots.size(), " entries but --nnodes is ", o.nnodes);
    for (int s : o.node_slots) ZT_CHECK(s >= 1, "--node-slots entries must be >= 1, got ", s);
    ZT_CHECK(o.node_slots[o.node_rank] == o.nproc_per_node, "--node-slots gives node ", o.node_rank,
             " ", o.node_slots[o.node_rank], " processes but --nproc-per-node is ",
             o.nproc_per_node);
  }
  for (const auto& e : o.env) split_assignment(e, "--env");
  if (o.transport == Transport::kMpi) {
    ZT_CHECK(o.nnodes == 1 && o.hostfile.empty(),
             "--transport mpi is single-node (one mpirun on this node); for several nodes use "
             "mpirun itself or --transport native");
  }
  ZT_CHECK(!o.ssh_command.empty(), "--ssh-command must not be empty");
  if (vm.count("rdzv-backend")) {
    const std::string b = vm["rdzv-backend"].as<std::string>();
    ZT_CHECK(b == "c10d" || b == "static", "--rdzv-backend must be c10d or static, got '", b, "'");
    ZT_CHECK((b == "c10d") == o.elastic, "--rdzv-backend ", b, " goes with --nnodes ",
             b == "c10d" ? "MIN:MAX" : "N");
  }
  ZT_CHECK(!o.rdzv_id.empty() && o.rdzv_id.find_first_of(" \t\n") == std::string::npos,
           "--rdzv-id must be one word, got '", o.rdzv_id, "'");
  if (o.elastic) {
    ZT_CHECK(!vm.count("node-rank") && o.node_slots.empty(),
             "--nnodes MIN:MAX: the rendezvous assigns node ranks; drop --node-rank/--node-slots");
    ZT_CHECK(o.hostfile.empty() && !o.standalone,
             "--nnodes MIN:MAX starts one node per ztrun; drop --hostfile/--standalone");
    ZT_CHECK(o.transport != Transport::kMpi,
             "--nnodes MIN:MAX needs --transport native (mpirun's job cannot change size)");
  } else {
    ZT_CHECK(!vm.count("rdzv-endpoint") && !vm.count("rdzv-conf") && !vm.count("rdzv-id"),
             "--rdzv-endpoint/--rdzv-conf/--rdzv-id are for an elastic job (--nnodes MIN:MAX); "
             "with --nnodes N use --master-addr");
  }
  if (vm.count("bind-core-list")) {
    ZT_CHECK(o.bind_cores_to_rank,
             "--bind-core-list needs --bind-cores-to-rank (the list is what the ranks are bound "
             "to)");
    parse_core_list(o.bind_core_list, "--bind-core-list");
  }
}

}  // namespace

const char* transport_name(Transport t) {
  switch (t) {
    case Transport::kAuto: return "auto";
    case Transport::kNative: return "native";
    case Transport::kMpi: return "mpi";
  }
  return "?";
}

int LaunchOptions::world_size() const {
  if (node_slots.empty()) return nnodes * nproc_per_node;
  return std::accumulate(node_slots.begin(), node_slots.end(), 0);
}

int LaunchOptions::rank_offset(int node) const {
  if (node_slots.empty()) return node * nproc_per_node;
  return std::accumulate(node_slots.begin(), node_slots.begin() + node, 0);
}

int LaunchOptions::local_world_size(int node) const {
  return node_slots.empty() ? nproc_per_node : node_slots[node];
}

std::pair<std::string, std::string> split_assignment(const std::string& text,
                                                     const std::string& flag) {
  const size_t eq = text.find('=');
  ZT_CHECK(eq != std::string::npos && eq > 0, flag, " needs KEY=VALUE, got '", text, "'");
  return {text.substr(0, eq), text.substr(eq + 1)};
}

bool wants_help(const std::vector<std::string>& args) {
  try {
    const SplitArgs split = split_args(args, make_description());
    for (const auto& a : split.launcher) {
      if (a == "--help") return true;
    }
    return false;
  } catch (const zt::Error&) {
    return false;  // parse_launch_options() reports the bad flag
  }
}

std::string launch_usage() {
  std::ostringstream os;
  os << make_description();
  os << "\nztrun --dump PID: every rank of the running ztrun PID writes its flight recorder dump\n"
        "  (<ZT_FLIGHT_DIR>/flight_r<rank>.json; read them with zt-trace DIR)\n";
  return os.str();
}

LaunchOptions parse_launch_options(const std::vector<std::string>& args) {
  const po::options_description desc = make_description();
  SplitArgs split = split_args(args, desc);
  po::variables_map vm;
  try {
    // No abbreviations: `--nproc` must not silently mean --nproc-per-node.
    const int style =
        po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    po::store(po::command_line_parser(split.launcher).options(desc).style(style).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    ZT_THROW(e.what());
  }
  LaunchOptions o;
  take(vm, "nproc-per-node", &o.nproc_per_node);
  if (vm.count("nnodes")) parse_nnodes(vm["nnodes"].as<std::string>(), &o);
  if (vm.count("rdzv-endpoint")) parse_endpoint(vm["rdzv-endpoint"].as<std::string>(), &o);
  if (vm.count("rdzv-conf")) parse_rdzv_conf(vm["rdzv-conf"].as<std::string>(), &o.rdzv_conf);
  take(vm, "rdzv-id", &o.rdzv_id);
  take(vm, "node-rank", &o.node_rank);
  take(vm, "master-addr", &o.master_addr);
  take(vm, "master-port", &o.master_port);
  take(vm, "launcher-port", &o.launcher_port);
  take(vm, "max-restarts", &o.max_restarts);
  take(vm, "monitor-interval", &o.monitor_interval_s);
  take(vm, "term-timeout", &o.term_timeout_s);
  take(vm, "log-dir", &o.log_dir);
  take(vm, "redirects", &o.redirects);
  take(vm, "hostfile", &o.hostfile);
  take(vm, "include", &o.include);
  take(vm, "exclude", &o.exclude);
  take(vm, "ssh-command", &o.ssh_command);
  take(vm, "env", &o.env);
  take(vm, "mpirun", &o.mpirun);
  take(vm, "bind-core-list", &o.bind_core_list);
  if (vm.count("transport")) o.transport = parse_transport(vm["transport"].as<std::string>());
  o.standalone = vm["standalone"].as<bool>();
  o.dry_run = vm["dry-run"].as<bool>();
  o.stop_on_stdin_eof = vm["stop-on-stdin-eof"].as<bool>();
  o.bind_cores_to_rank = vm["bind-cores-to-rank"].as<bool>();
  if (vm.count("node-slots")) {
    o.node_slots = parse_int_list(vm["node-slots"].as<std::string>(), "--node-slots");
  }
  if (!split.program.empty()) {
    o.program = split.program.front();
    o.program_args.assign(split.program.begin() + 1, split.program.end());
  }
  validate(o, vm);
  return o;
}

}  // namespace zt::launcher
