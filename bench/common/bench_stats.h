#pragma once
// Helpers the benchmark programs share: the medians their tables report over timed repetitions,
// and the process's memory counters from /proc/self/status. Header-only: the bench targets put
// the source root on the include path and link no library of their own.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace zt::bench {

// The median of v: its middle value, for an even count the mean of the two middle values; 0 when
// v is empty.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The upper median of v: the value at index size / 2 once sorted, so always one of the measured
// values (for an even count the larger of the two middle ones, not their mean); 0 when v is empty.
inline double upper_median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The number on the /proc/self/status line that starts with `key` (with its colon, e.g. "VmRSS:"
// or "VmHWM:"), in KiB; 0 when there is no such line.
inline int64_t read_status_kib(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) == 0) return std::atoll(line.c_str() + std::strlen(key));
  }
  return 0;
}

}  // namespace zt::bench
