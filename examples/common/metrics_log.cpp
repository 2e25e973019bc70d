#include "examples/common/metrics_log.h"

#include <cmath>
#include <sstream>

#include "core/base/error.h"

namespace zt::examples {

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  if (path.empty()) return;
  out_.open(path, std::ios::trunc);
  ZT_CHECK(out_.good(), "metrics: cannot write ", path);
}

void MetricsLog::write(const std::vector<std::pair<std::string, double>>& fields) {
  if (path_.empty()) return;
  std::ostringstream line;
  line.precision(8);
  line << '{';
  for (size_t i = 0; i < fields.size(); ++i) {
    const double v = fields[i].second;
    line << (i ? ", " : "") << '"' << fields[i].first << "\": ";
    if (!std::isfinite(v)) {
      line << "null";
    } else if (v == std::floor(v) && std::abs(v) < 9e15) {
      line << static_cast<int64_t>(v);
    } else {
      line << v;
    }
  }
  line << "}\n";
  out_ << line.str();
  out_.flush();
  ZT_CHECK(out_.good(), "metrics: write to ", path_, " failed");
}

}  // namespace zt::examples
