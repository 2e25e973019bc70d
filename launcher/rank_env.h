#pragma once
// The environment each rank starts with (docs/DESIGN.md, Launch environment).
//
// Layers, later ones win: ztrun's own environment; `.ztrun_env` files ($HOME/.ztrun_env, then
// ./.ztrun_env, like DeepSpeed's .deepspeed_env, read by the ztrun of every node); --env K=V;
// OMP_NUM_THREADS = cores / local ranks when still unset; then the launch facts RANK,
// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT and
// ZT_RESTART_COUNT, which nothing overrides.

#include <map>
#include <string>
#include <vector>

namespace zt::launcher {

using EnvMap = std::map<std::string, std::string>;

inline constexpr const char* kEnvFileName = ".ztrun_env";
inline constexpr const char* kOmpNumThreads = "OMP_NUM_THREADS";

// Where one rank sits in the launch.
struct RankIdentity {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int group_rank = 0;  // the node's rank
  int restart_count = 0;
  std::string master_addr;
  int master_port = 0;
};

EnvMap current_environment();

// Reads `KEY=VALUE` lines (`export ` prefix, `#` comments and blank lines allowed). A missing file
// gives an empty map; a malformed line is an error naming the file and line.
EnvMap read_env_file(const std::string& path);
EnvMap parse_env_text(const std::string& text, const std::string& source);

// The .ztrun_env files this node reads, in the order they apply.
std::vector<std::string> env_file_paths();

// The shared part of every rank's environment: base + env files + --env + OMP_NUM_THREADS.
// `omp_threads_set` reports whether OMP_NUM_THREADS was filled in by ztrun.
EnvMap node_environment(const EnvMap& base, const std::vector<std::string>& env_files,
                        const std::vector<std::string>& env_flags, int local_world_size, int cores,
                        bool* omp_threads_set);

// node_environment plus this rank's launch facts.
EnvMap rank_environment(const EnvMap& node_env, const RankIdentity& id);

// max(1, cores / local_world_size): CPU training's speed is its thread count, and oversubscribed
// OpenMP threads are the worst case.
int default_omp_threads(int local_world_size, int cores);

// CPUs this process may run on (its affinity mask), at least 1.
int usable_cores();

std::vector<std::string> to_envp(const EnvMap& env);

}  // namespace zt::launcher
