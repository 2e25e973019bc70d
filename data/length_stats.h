#pragma once
// Summary of a length distribution (tokens per sample), for zt-pretokenize's report and to pick
// a max_length near the 99th percentile.

#include <cstdint>
#include <string>
#include <vector>

namespace zt::data {

struct LengthStats {
  int64_t count = 0;
  int64_t total = 0;
  int64_t min = 0, p50 = 0, p90 = 0, p95 = 0, p99 = 0, max = 0;
  double mean = 0;
  // "n=31102 tokens=1034567 min=3 p50=30 p90=52 p95=58 p99=71 max=120 mean=33.3"
  std::string to_string() const;
};

LengthStats summarize_lengths(std::vector<int64_t> lengths);
// Nearest-rank percentile (q in [0, 100]) of an ascending vector.
int64_t percentile(const std::vector<int64_t>& sorted, double q);

}  // namespace zt::data
