#include "launcher/core_binding.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <linux/mempolicy.h>
#include <sched.h>
#include <set>
#include <sstream>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/env_vars.h"
#include "base/error.h"

namespace zt::launcher {
namespace {

namespace fs = std::filesystem;

// Far above any machine's CPU count; bounds what a typo such as 0-99999999 expands to.
constexpr int kMaxCpu = 1 << 16;
constexpr size_t kWordBits = sizeof(unsigned long) * 8;

// A decimal number filling `s`, -1 otherwise (stoi would take " 7" and "7x").
int parse_number(const std::string& s) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) {
    return -1;
  }
  return std::stoi(s);
}

std::string read_trimmed(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

// A sysfs CPU list; empty when the file is missing or says something unexpected (the caller then
// knows nothing, which is what it assumes on machines without the file).
std::vector<int> read_sys_list(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return {};
  try {
    return parse_core_list(read_trimmed(path), path.string(), /*allow_empty=*/true);
  } catch (const zt::Error&) {
    return {};
  }
}

// The affinity mask of this process; the buffer grows until the kernel's CPU count fits in it.
std::vector<int> affinity_mask() {
  for (size_t cpus = 1024; cpus <= static_cast<size_t>(kMaxCpu); cpus *= 2) {
    std::vector<unsigned long> words(cpus / kWordBits, 0);
    if (::sched_getaffinity(0, words.size() * sizeof(unsigned long),
                            reinterpret_cast<cpu_set_t*>(words.data())) == 0) {
      std::vector<int> out;
      for (size_t c = 0; c < cpus; ++c) {
        if (words[c / kWordBits] >> (c % kWordBits) & 1UL) out.push_back(static_cast<int>(c));
      }
      return out;
    }
    ZT_CHECK(errno == EINVAL, "sched_getaffinity() failed: ", std::strerror(errno));
  }
  ZT_THROW("sched_getaffinity() failed: more than ", kMaxCpu, " CPUs");
}

bool contains(const std::vector<int>& sorted, int v) {
  return std::binary_search(sorted.begin(), sorted.end(), v);
}

// The default list: one thread per physical core, NUMA node by node, then any CPU no node lists.
std::vector<int> default_cores(const CpuLayout& l) {
  std::vector<int> out;
  std::set<int> taken;
  for (const auto& node : l.numa_nodes) {
    for (int c : l.one_per_core) {
      if (contains(node, c) && taken.insert(c).second) out.push_back(c);
    }
  }
  for (int c : l.one_per_core) {
    if (taken.insert(c).second) out.push_back(c);
  }
  return out;
}

// Nodes that bind memory together: those with CPUs, grouped by identical CPU lists (fake NUMA
// splits one node's memory into several nodes that list the same CPUs).
struct NodeGroup {
  std::vector<int> nodes;
  std::vector<int> cpus;  // ascending
};

std::vector<NodeGroup> node_groups(const CpuLayout& l) {
  std::vector<NodeGroup> groups;
  for (size_t n = 0; n < l.numa_nodes.size(); ++n) {
    std::vector<int> cpus = l.numa_nodes[n];
    if (cpus.empty()) continue;
    std::sort(cpus.begin(), cpus.end());
    auto same = std::find_if(groups.begin(), groups.end(),
                             [&](const NodeGroup& g) { return g.cpus == cpus; });
    if (same != groups.end()) {
      same->nodes.push_back(static_cast<int>(n));
    } else {
      groups.push_back({{static_cast<int>(n)}, std::move(cpus)});
    }
  }
  return groups;
}

}  // namespace

std::vector<int> parse_core_list(const std::string& text, const std::string& what,
                                 bool allow_empty) {
  std::vector<int> out;
  if (text.empty()) {
    ZT_CHECK(allow_empty, what, " must not be empty");
    return out;
  }
  for (size_t begin = 0;;) {
    const size_t comma = text.find(',', begin);
    const std::string item =
        text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    const size_t dash = item.find('-');
    const int first = parse_number(item.substr(0, dash));
    const int last = dash == std::string::npos ? first : parse_number(item.substr(dash + 1));
    ZT_CHECK(first >= 0 && last >= first, what, ": '", item, "' in '", text,
             "' is neither a core number nor a range a-b with a <= b");
    ZT_CHECK(last < kMaxCpu, what, ": core ", last, " in '", text, "' is above ", kMaxCpu - 1);
    ZT_CHECK(out.empty() || first > out.back(), what, ": '", item, "' in '", text,
             "' overlaps or comes before the item ahead of it (list cores in ascending order)");
    for (int c = first; c <= last; ++c) out.push_back(c);
    if (comma == std::string::npos) return out;
    begin = comma + 1;
  }
}

std::string format_core_list(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::vector<RankCores> plan_core_binding(const CpuLayout& layout, const std::string& core_list,
                                         int local_ranks) {
  ZT_INTERNAL_ASSERT(local_ranks >= 1);
  std::vector<int> cores;
  if (!core_list.empty()) {
    cores = parse_core_list(core_list, "--bind-core-list");
    for (int c : cores) {
      ZT_CHECK(contains(layout.allowed, c), "--bind-core-list: core ", c,
               " is not one ztrun may run on (its affinity mask: ",
               format_core_list(layout.allowed), ")");
    }
  } else {
    cores = default_cores(layout);
  }
  const int n = static_cast<int>(cores.size());
  ZT_CHECK(n >= local_ranks, "--bind-cores-to-rank: ", local_ranks, " local ranks but ", n,
           n == 1 ? " core" : " cores", " (",
           core_list.empty() ? "one per physical core ztrun may run on: " : "--bind-core-list ",
           format_core_list(cores), "); each rank needs at least one");
  const int per_rank = n / local_ranks;
  const std::vector<NodeGroup> groups = node_groups(layout);
  std::vector<RankCores> plan(static_cast<size_t>(local_ranks));
  for (int r = 0; r < local_ranks; ++r) {
    RankCores& rc = plan[static_cast<size_t>(r)];
    rc.cpus.assign(cores.begin() + r * per_rank, cores.begin() + (r + 1) * per_rank);
    std::sort(rc.cpus.begin(), rc.cpus.end());
    if (groups.size() < 2) continue;  // one node: a memory policy would change nothing
    for (const NodeGroup& g : groups) {
      if (std::includes(g.cpus.begin(), g.cpus.end(), rc.cpus.begin(), rc.cpus.end())) {
        rc.memory_nodes = g.nodes;
        break;
      }
    }
  }
  return plan;
}

CpuLayout read_cpu_layout() {
  CpuLayout l;
  l.allowed = affinity_mask();
  for (int c : l.allowed) {
    const std::vector<int> siblings = read_sys_list(
        "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/thread_siblings_list");
    const bool earlier_sibling = std::any_of(
        siblings.begin(), siblings.end(), [&](int s) { return s < c && contains(l.allowed, s); });
    if (!earlier_sibling) l.one_per_core.push_back(c);
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/sys/devices/system/node", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("node", 0) != 0) continue;
    const int node = parse_number(name.substr(4));
    if (node < 0 || node >= kMaxCpu) continue;
    if (static_cast<size_t>(node) >= l.numa_nodes.size()) l.numa_nodes.resize(node + 1);
    l.numa_nodes[node] = read_sys_list(entry.path() / "cpulist");
  }
  return l;
}

std::string memory_policy_error(const std::vector<RankCores>& plan) {
  std::vector<BindingMasks> masks;
  for (const RankCores& rc : plan) {
    if (!rc.memory_nodes.empty()) masks.emplace_back(RankCores{{}, rc.memory_nodes});
  }
  if (masks.empty()) return "";
  const pid_t pid = ::fork();
  if (pid < 0) return std::string("fork() failed: ") + std::strerror(errno);
  if (pid == 0) {
    for (const BindingMasks& m : masks) {
      if (const int err = m.apply_memory_policy()) ::_exit(err & 0xff);
    }
    ::_exit(0);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  return WIFEXITED(status) ? std::strerror(WEXITSTATUS(status)) : "the probe process died";
}

std::string apply_binding_environment(EnvMap* env, const std::vector<std::string>& env_flags,
                                      int cores_per_rank) {
  const auto kmp = env->find(zt::env::kKmpAffinity);
  ZT_CHECK(kmp == env->end(), "--bind-cores-to-rank: ", zt::env::kKmpAffinity, " is set ('",
           kmp->second, "'), by which Intel's OpenMP would re-pin each rank's threads; unset it");
  const std::string want = std::to_string(cores_per_rank);
  const std::string prefix = std::string(kOmpNumThreads) + "=";
  const bool from_flag = std::any_of(env_flags.begin(), env_flags.end(),
                                     [&](const auto& f) { return f.rfind(prefix, 0) == 0; });
  const auto it = env->find(kOmpNumThreads);
  if (from_flag) {
    ZT_INTERNAL_ASSERT(it != env->end(), "--env ", prefix, " missing from the environment");
    if (it->second == want) return "";
    return "keeping --env " + prefix + it->second + " (cores per rank: " + want + ")";
  }
  std::string note;
  if (it != env->end() && it->second != want) {
    note = prefix + it->second + " from the environment replaced by " + want + " (cores per rank)";
  }
  (*env)[kOmpNumThreads] = want;
  return note;
}

std::string describe_plan(const std::vector<RankCores>& plan) {
  std::string out;
  for (size_t r = 0; r < plan.size(); ++r) {
    const RankCores& rc = plan[r];
    out += (r ? ", " : "") + std::string("local rank ") + std::to_string(r) + ": core" +
           (rc.cpus.size() == 1 ? " " : "s ") + format_core_list(rc.cpus);
    if (!rc.memory_nodes.empty()) {
      out += std::string(" (NUMA node") + (rc.memory_nodes.size() == 1 ? " " : "s ") +
             format_core_list(rc.memory_nodes) + ")";
    }
  }
  return out;
}

BindingMasks::BindingMasks(const RankCores& cores) {
  if (!cores.cpus.empty()) {
    const int top = *std::max_element(cores.cpus.begin(), cores.cpus.end());
    cpus_.assign(static_cast<size_t>(top) / kWordBits + 1, 0);
    for (int c : cores.cpus) cpus_[c / kWordBits] |= 1UL << (c % kWordBits);
  }
  if (!cores.memory_nodes.empty()) {
    // set_mempolicy reads maxnode - 1 bits: one bit to spare above the highest node.
    const int top = *std::max_element(cores.memory_nodes.begin(), cores.memory_nodes.end());
    nodes_.assign(static_cast<size_t>(top + 1) / kWordBits + 1, 0);
    for (int n : cores.memory_nodes) nodes_[n / kWordBits] |= 1UL << (n % kWordBits);
  }
}

int BindingMasks::apply_affinity() const {
  if (cpus_.empty()) return 0;
  const int rc = ::sched_setaffinity(0, cpus_.size() * sizeof(unsigned long),
                                     reinterpret_cast<const cpu_set_t*>(cpus_.data()));
  return rc == 0 ? 0 : errno;
}

int BindingMasks::apply_memory_policy() const {
  if (nodes_.empty()) return 0;
  // The raw system call: glibc has no wrapper, and libnuma's would be one more dependency.
  const long rc = ::syscall(SYS_set_mempolicy, MPOL_BIND, nodes_.data(), nodes_.size() * kWordBits);
  return rc == 0 ? 0 : errno;
}

}  // namespace zt::launcher
