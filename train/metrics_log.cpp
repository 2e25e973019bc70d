#include "train/metrics_log.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "base/error.h"

namespace zt::train {
namespace {

// The shortest of %.8g .. %.17g that parses back to v: short for round values, exact always
// (the fault-injection test compares losses of a resumed run bit for bit).
std::string round_trip(double v) {
  std::string s;
  for (int digits = 8; digits <= 17; ++digits) {
    std::ostringstream o;
    o.precision(digits);
    o << v;
    s = o.str();
    if (std::strtod(s.c_str(), nullptr) == v) break;
  }
  return s;
}

}  // namespace

MetricsLog::MetricsLog(const std::string& path, bool append) : path_(path) {
  if (path.empty()) return;
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  ZT_CHECK(out_.good(), "metrics: cannot write ", path);
}

void MetricsLog::write(const std::vector<std::pair<std::string, double>>& fields) {
  if (path_.empty()) return;
  std::ostringstream line;
  line << '{';
  for (size_t i = 0; i < fields.size(); ++i) {
    const double v = fields[i].second;
    line << (i ? ", " : "") << '"' << fields[i].first << "\": ";
    if (!std::isfinite(v)) {
      line << "null";
    } else if (v == std::floor(v) && std::abs(v) < 9e15) {
      line << static_cast<int64_t>(v);
    } else {
      line << round_trip(v);
    }
  }
  line << "}\n";
  out_ << line.str();
  out_.flush();
  ZT_CHECK(out_.good(), "metrics: write to ", path_, " failed");
}

}  // namespace zt::train
