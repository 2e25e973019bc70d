// zt_launch_probe: the rank program of the launcher's multi-process tests.
//
// Each rank reads its launch facts from the environment (ztrun/torchrun names, else OpenMPI's,
// else Slurm's), checks them, then does a real cross-process reduction through LibTorch's c10d
// TCPStore on MASTER_ADDR:MASTER_PORT (rank 0 hosts it): every rank adds rank+1 to one key and
// waits for N(N+1)/2. Rank 0 then reads every rank's facts from the store and checks that the
// ranks are exactly 0..N-1 and that each node's local ranks are 0..local_world-1.
// Options inject the failures the tests need (exit code, ignoring SIGTERM, a lingering child).
//
// Exit codes: 0 ok, 2 bad launch environment, 4 reduction or consistency failure, or the
// injected --fail-code.
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <signal.h>
#include <sstream>
#include <thread>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "base/env_vars.h"
#include "base/error.h"
#include "base/main_guard.h"

namespace {

namespace po = boost::program_options;

struct Facts {
  std::string source;  // ztrun | mpirun | slurm
  int rank = -1, world = -1, local_rank = -1, local_world = -1;
  int group = -1;    // node rank when the launcher says it
  int restart = -1;  // ZT_RESTART_COUNT under ztrun
  std::string master_addr;
  int master_port = 0;

  // The launcher-independent part, compared across launchers.
  std::string line() const {
    std::ostringstream os;
    os << "rank=" << rank << " world=" << world << " local_rank=" << local_rank
       << " local_world=" << local_world;
    return os.str();
  }
};

int env_int(const char* name) {
  const char* v = std::getenv(name);
  ZT_CHECK(v != nullptr, "launch variable ", name, " is not set");
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  ZT_CHECK(end != v && *end == '\0', "launch variable ", name, "='", v, "' is not an integer");
  return static_cast<int>(x);
}

std::string env_str(const char* name) {
  const char* v = std::getenv(name);
  ZT_CHECK(v != nullptr && *v, "launch variable ", name, " is not set");
  return v;
}

// srun sets SLURM_NTASKS_PER_NODE only when --ntasks-per-node is given; SLURM_STEP_TASKS_PER_NODE
// is always there, in Slurm's compressed form: "2", "2(x3)", "3,2(x2)" (one count per node).
int slurm_local_world(int node_id) {
  if (std::getenv(zt::env::kSlurmNTasksPerNode)) return env_int(zt::env::kSlurmNTasksPerNode);
  std::stringstream in(env_str("SLURM_STEP_TASKS_PER_NODE"));
  int node = 0;
  for (std::string item; std::getline(in, item, ',');) {
    const int count = std::stoi(item);
    const size_t x = item.find("(x");
    const int repeat = x == std::string::npos ? 1 : std::stoi(item.substr(x + 2));
    if (node_id < node + repeat) return count;
    node += repeat;
  }
  ZT_THROW("SLURM_STEP_TASKS_PER_NODE has no entry for node ", node_id);
}

Facts discover() {
  namespace e = zt::env;
  Facts f;
  if (std::getenv(e::kRank)) {
    f.source = "ztrun";
    f.rank = env_int(e::kRank);
    f.world = env_int(e::kWorldSize);
    f.local_rank = env_int(e::kLocalRank);
    f.local_world = env_int(e::kLocalWorldSize);
    f.group = env_int(e::kGroupRank);
    f.restart = env_int(e::kRestartCount);
    f.master_addr = env_str(e::kMasterAddr);
    f.master_port = env_int(e::kMasterPort);
  } else if (std::getenv(e::kOmpiRank)) {
    f.source = "mpirun";
    f.rank = env_int(e::kOmpiRank);
    f.world = env_int(e::kOmpiSize);
    f.local_rank = env_int(e::kOmpiLocalRank);
    f.local_world = env_int(e::kOmpiLocalSize);
  } else if (std::getenv(e::kSlurmProcId)) {
    f.source = "slurm";
    f.rank = env_int(e::kSlurmProcId);
    f.world = env_int(e::kSlurmNTasks);
    f.local_rank = env_int(e::kSlurmLocalId);
    f.group = env_int(e::kSlurmNodeId);
    f.local_world = slurm_local_world(f.group);
  } else {
    ZT_THROW("no launch environment: neither RANK, OMPI_COMM_WORLD_RANK nor SLURM_PROCID is set");
  }
  ZT_CHECK(f.world >= 1 && f.rank >= 0 && f.rank < f.world, "rank ", f.rank, " outside world ",
           f.world);
  ZT_CHECK(f.local_world >= 1 && f.local_world <= f.world && f.local_rank >= 0 &&
               f.local_rank < f.local_world,
           "local rank ", f.local_rank, " outside local world ", f.local_world);
  return f;
}

// Every rank's facts as rank 0 reads them back, checked as a whole.
void check_world(c10d::Store& store, const Facts& self) {
  std::map<int, std::set<int>> local_ranks;  // group -> local ranks seen
  std::map<int, int> local_worlds;
  for (int r = 0; r < self.world; ++r) {
    const std::vector<uint8_t> raw = store.get("facts/" + std::to_string(r));
    std::istringstream in(std::string(raw.begin(), raw.end()));
    int rank, world, local_rank, local_world, group;
    in >> rank >> world >> local_rank >> local_world >> group;
    ZT_CHECK(rank == r, "store key facts/", r, " holds rank ", rank);
    ZT_CHECK(world == self.world, "rank ", r, " sees world ", world, ", rank 0 sees ", self.world);
    // Without a node rank (mpirun, slurm), ranks of one node share the node's process ordering;
    // group them by rank / local_world, which holds for the block mapping both use here.
    const int key = group >= 0 ? group : rank / local_world;
    ZT_CHECK(local_ranks[key].insert(local_rank).second, "local rank ", local_rank,
             " appears twice on node ", key);
    ZT_CHECK(!local_worlds.count(key) || local_worlds[key] == local_world, "node ", key,
             " has two local world sizes");
    local_worlds[key] = local_world;
  }
  for (const auto& [node, ranks] : local_ranks) {
    ZT_CHECK(static_cast<int>(ranks.size()) == local_worlds[node] &&
                 *ranks.rbegin() == local_worlds[node] - 1,
             "node ", node, " has local ranks that are not 0..", local_worlds[node] - 1);
  }
}

int probe(int argc, char** argv) {
  po::options_description desc("zt_launch_probe");
  desc.add_options()("facts-dir", po::value<std::string>()->default_value(""))(
      "master-addr", po::value<std::string>()->default_value(""))(
      "master-port", po::value<int>()->default_value(0))("fail-rank",
                                                         po::value<int>()->default_value(-1))(
      "fail-code", po::value<int>()->default_value(3))("fail-while-restart-below",
                                                       po::value<int>()->default_value(1 << 30))(
      "sleep", po::value<double>()->default_value(0))("ignore-sigterm", po::bool_switch())(
      "grandchild", po::bool_switch())("print-env",
                                       po::value<std::vector<std::string>>()->composing());
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  po::notify(vm);

  Facts f;
  try {
    f = discover();
  } catch (const zt::Error& e) {
    std::cerr << "probe: bad launch environment: " << e.message() << std::endl;
    return 2;
  }
  if (!vm["master-addr"].as<std::string>().empty())
    f.master_addr = vm["master-addr"].as<std::string>();
  if (vm["master-port"].as<int>() > 0) f.master_port = vm["master-port"].as<int>();
  const char* omp = std::getenv("OMP_NUM_THREADS");
  std::cout << "probe " << f.line() << " group=" << f.group << " restart=" << f.restart
            << " source=" << f.source << " omp=" << (omp ? omp : "unset") << " pid=" << getpid()
            << std::endl;
  if (vm.count("print-env")) {
    for (const auto& name : vm["print-env"].as<std::vector<std::string>>()) {
      const char* v = std::getenv(name.c_str());
      std::cout << "env " << name << "=" << (v ? v : "<unset>") << std::endl;
    }
  }
  if (vm["ignore-sigterm"].as<bool>()) ::signal(SIGTERM, SIG_IGN);
  if (vm["grandchild"].as<bool>() && ::fork() == 0) {
    ::execlp("sleep", "sleep", "300", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  if (f.rank == vm["fail-rank"].as<int>() && f.restart < vm["fail-while-restart-below"].as<int>()) {
    // The wall-clock time lets a test measure how fast the launcher reacts to this exit.
    const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    std::cerr << "probe: rank " << f.rank << " failing on purpose with code "
              << vm["fail-code"].as<int>() << " at_ms=" << now_ms << std::endl;
    return vm["fail-code"].as<int>();
  }

  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(f.master_port);
  opts.isServer = f.rank == 0;
  opts.numWorkers = f.world;
  opts.waitWorkers = false;
  opts.timeout = std::chrono::seconds(60);
  c10d::TCPStore store(f.master_addr, opts);
  // Store::set(string, string) is hidden by TCPStore's override; call it through the base.
  static_cast<c10d::Store&>(store).set(
      "facts/" + std::to_string(f.rank),
      std::to_string(f.rank) + " " + std::to_string(f.world) + " " + std::to_string(f.local_rank) +
          " " + std::to_string(f.local_world) + " " + std::to_string(f.group));
  const int64_t expected = static_cast<int64_t>(f.world) * (f.world + 1) / 2;
  int64_t sum = store.add("sum", f.rank + 1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (sum < expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    sum = store.add("sum", 0);
  }
  if (sum != expected) {
    std::cerr << "probe: rank " << f.rank << " reduction gave " << sum << ", expected " << expected
              << std::endl;
    return 4;
  }
  if (f.rank == 0) {
    try {
      check_world(store, f);
    } catch (const zt::Error& e) {
      std::cerr << "probe: " << e.message() << std::endl;
      return 4;
    }
  }
  std::cout << "probe rank " << f.rank << " all-reduce sum " << sum << " ok" << std::endl;
  const std::string dir = vm["facts-dir"].as<std::string>();
  if (!dir.empty()) {
    // Written after the reduction: a test that sees all files knows every rank got this far.
    std::ofstream(dir + "/rank_" + std::to_string(f.rank) + ".txt")
        << f.line() << " group=" << f.group << " restart=" << f.restart << " pid=" << getpid()
        << " omp=" << (omp ? omp : "unset") << "\n";
  }
  // Rank 0 hosts the store: it leaves last.
  store.add("done", 1);
  while (f.rank == 0 && store.add("done", 0) < f.world) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const double sleep_s = vm["sleep"].as<double>();
  if (sleep_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_main("zt_launch_probe", [&] { return probe(argc, argv); });
}
