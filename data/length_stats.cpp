#include "data/length_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

namespace zt::data {

int64_t percentile(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  auto rank = static_cast<size_t>(std::ceil(q / 100.0 * static_cast<double>(sorted.size())));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

LengthStats summarize_lengths(std::vector<int64_t> lengths) {
  LengthStats s;
  if (lengths.empty()) return s;
  std::sort(lengths.begin(), lengths.end());
  s.count = static_cast<int64_t>(lengths.size());
  s.total = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  s.min = lengths.front();
  s.max = lengths.back();
  s.p50 = percentile(lengths, 50);
  s.p90 = percentile(lengths, 90);
  s.p95 = percentile(lengths, 95);
  s.p99 = percentile(lengths, 99);
  s.mean = static_cast<double>(s.total) / static_cast<double>(s.count);
  return s;
}

std::string LengthStats::to_string() const {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << "n=" << count << " tokens=" << total << " min=" << min << " p50=" << p50 << " p90=" << p90
     << " p95=" << p95 << " p99=" << p99 << " max=" << max << " mean=" << mean;
  return os.str();
}

}  // namespace zt::data
