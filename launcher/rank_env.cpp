#include "launcher/rank_env.h"

#include <cstdlib>
#include <fstream>
#include <sched.h>
#include <sstream>
#include <thread>
#include <unistd.h>  // environ (glibc declares it under _GNU_SOURCE, g++'s default)

#include "base/env_vars.h"
#include "base/error.h"
#include "launcher/hostfile.h"

namespace zt::launcher {
namespace {

// Drops one level of matching quotes, as a shell would for a simple value.
std::string unquote(const std::string& v) {
  if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front()) {
    return v.substr(1, v.size() - 2);
  }
  return v;
}

}  // namespace

EnvMap current_environment() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

EnvMap parse_env_text(const std::string& text, const std::string& source) {
  EnvMap env;
  std::stringstream ss(text);
  std::string raw;
  int line_no = 0;
  while (std::getline(ss, raw)) {
    ++line_no;
    std::string line = trim(raw);
    if (line.empty() || line[0] == '#') continue;
    if (line.rfind("export ", 0) == 0) line = trim(line.substr(7));
    const size_t eq = line.find('=');
    bool ok = eq != std::string::npos && eq > 0;
    for (size_t i = 0; ok && i < eq; ++i) {
      const char c = line[i];
      ok = c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (i > 0 && c >= '0' && c <= '9');
    }
    ZT_CHECK(ok, source, ":", line_no, ": expected KEY=VALUE, got '", trim(raw), "'");
    env[line.substr(0, eq)] = unquote(line.substr(eq + 1));
  }
  return env;
}

EnvMap read_env_file(const std::string& path) {
  std::ifstream in(path);
  if (!in.good()) return {};
  std::stringstream buf;
  buf << in.rdbuf();
  return parse_env_text(buf.str(), path);
}

std::vector<std::string> env_file_paths() {
  std::vector<std::string> paths;
  if (const char* home = ::zt::env::get(env::kHome))
    paths.push_back(std::string(home) + "/" + kEnvFileName);
  paths.push_back(std::string("./") + kEnvFileName);
  return paths;
}

int default_omp_threads(int local_world_size, int cores) {
  if (local_world_size < 1) local_world_size = 1;
  return std::max(1, cores / local_world_size);
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

EnvMap node_environment(const EnvMap& base, const std::vector<std::string>& env_files,
                        const std::vector<std::string>& env_flags, int local_world_size, int cores,
                        bool* omp_threads_set) {
  EnvMap env = base;
  for (const auto& path : env_files) {
    for (auto& [k, v] : read_env_file(path)) env[k] = v;
  }
  for (const auto& flag : env_flags) {
    const size_t eq = flag.find('=');
    ZT_CHECK(eq != std::string::npos && eq > 0, "--env needs KEY=VALUE, got '", flag, "'");
    env[flag.substr(0, eq)] = flag.substr(eq + 1);
  }
  const bool set_omp = env.find(kOmpNumThreads) == env.end();
  if (set_omp) env[kOmpNumThreads] = std::to_string(default_omp_threads(local_world_size, cores));
  if (omp_threads_set) *omp_threads_set = set_omp;
  return env;
}

EnvMap rank_environment(const EnvMap& node_env, const RankIdentity& id) {
  ZT_INTERNAL_ASSERT(id.rank >= 0 && id.rank < id.world_size);
  ZT_INTERNAL_ASSERT(id.local_rank >= 0 && id.local_rank < id.local_world_size);
  EnvMap env = node_env;
  env[zt::env::kRank] = std::to_string(id.rank);
  env[zt::env::kLocalRank] = std::to_string(id.local_rank);
  env[zt::env::kWorldSize] = std::to_string(id.world_size);
  env[zt::env::kLocalWorldSize] = std::to_string(id.local_world_size);
  env[zt::env::kGroupRank] = std::to_string(id.group_rank);
  env[zt::env::kMasterAddr] = id.master_addr;
  env[zt::env::kMasterPort] = std::to_string(id.master_port);
  env[zt::env::kRestartCount] = std::to_string(id.restart_count);
  return env;
}

std::vector<std::string> to_envp(const EnvMap& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace zt::launcher
