// zt_affinity_probe: one line about where this rank may run, for ztrun_bind.sh to compare with
// ztrun's plan:
//
//   affinity rank=1 local_rank=1 cpus=2-3 ncpus=2 omp=2 mempolicy=bind:1
//
// cpus: sched_getaffinity, as a range list; omp: OMP_NUM_THREADS ("unset" when it is);
// mempolicy: get_mempolicy's mode (default, bind:<nodes>, or another mode's number). Needs nothing
// but the C library, so it starts in milliseconds under either transport.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <linux/mempolicy.h>
#include <sched.h>
#include <string>
#include <sys/syscall.h>
#include <unistd.h>
#include <vector>

namespace {

constexpr size_t kWordBits = sizeof(unsigned long) * 8;

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

// Set bits of `words` as a range list, "0-2,5".
std::string range_list(const std::vector<unsigned long>& words, int* count) {
  std::string out;
  *count = 0;
  const int bits = static_cast<int>(words.size() * kWordBits);
  auto set = [&](int b) { return b < bits && (words[b / kWordBits] >> (b % kWordBits) & 1UL); };
  for (int b = 0; b < bits; ++b) {
    if (!set(b)) continue;
    int e = b;
    while (set(e + 1)) ++e;
    out += (out.empty() ? "" : ",") + std::to_string(b);
    if (e > b) out += "-" + std::to_string(e);
    *count += e - b + 1;
    b = e;
  }
  return out;
}

std::string mempolicy() {
  int mode = -1;
  std::vector<unsigned long> nodes(16, 0);  // 1024 nodes
  if (::syscall(SYS_get_mempolicy, &mode, nodes.data(), nodes.size() * kWordBits, nullptr, 0) !=
      0) {
    return std::string("unknown(") + std::strerror(errno) + ")";
  }
  if (mode == MPOL_DEFAULT) return "default";
  int count = 0;
  const std::string list = range_list(nodes, &count);
  return mode == MPOL_BIND ? "bind:" + list : "mode" + std::to_string(mode) + ":" + list;
}

}  // namespace

int main() {
  std::vector<unsigned long> cpus(1024 / kWordBits, 0);
  if (::sched_getaffinity(0, cpus.size() * sizeof(unsigned long),
                          reinterpret_cast<cpu_set_t*>(cpus.data())) != 0) {
    std::fprintf(stderr, "zt_affinity_probe: sched_getaffinity: %s\n", std::strerror(errno));
    return 1;
  }
  int ncpus = 0;
  const std::string list = range_list(cpus, &ncpus);
  std::printf("affinity rank=%s local_rank=%s cpus=%s ncpus=%d omp=%s mempolicy=%s\n",
              env_or("RANK", "?").c_str(), env_or("LOCAL_RANK", "?").c_str(), list.c_str(), ncpus,
              env_or("OMP_NUM_THREADS", "unset").c_str(), mempolicy().c_str());
  return 0;
}
