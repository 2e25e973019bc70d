#include "parallel/comms_logger.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/logging.h"

namespace zt::dist {

Bandwidth calc_bw_log(const std::string& op, int64_t bytes, double latency_ms, int n) {
  Bandwidth b;
  if (latency_ms <= 0 || n <= 0) return b;
  double size = static_cast<double>(bytes);
  const double nn = n;
  if (op == "all_to_all") {
    b.algbw_gbps = size / latency_ms;
    b.busbw_gbps = size / latency_ms * ((nn - 1) / nn);
  } else if (op == "all_gather" || op == "reduce_scatter") {
    size *= nn;
    b.algbw_gbps = size / latency_ms;
    b.busbw_gbps = size / latency_ms * ((nn - 1) / nn);
  } else if (op == "all_reduce") {
    b.algbw_gbps = size * 2 / latency_ms;
    b.busbw_gbps = size / latency_ms * (2 * (nn - 1) / nn);
  } else {  // broadcast, barrier and any point-to-point op
    b.algbw_gbps = b.busbw_gbps = size / latency_ms;
  }
  // bytes per ms -> Gbit/s: * 8 bits, * 1e3 ms/s, / 1e9.
  b.algbw_gbps *= 8 / 1e6;
  b.busbw_gbps *= 8 / 1e6;
  return b;
}

std::string convert_size(int64_t bytes) {
  if (bytes == 0) return "0B";
  static const char* const kNames[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB"};
  const int i = static_cast<int>(std::floor(std::log(static_cast<double>(bytes)) / std::log(1024)));
  const double s = std::round(static_cast<double>(bytes) / std::pow(1024.0, i) * 100) / 100;
  // Python's str() of the rounded float: at least one decimal, no trailing zeros.
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", s);
  std::string text = buf;
  while (text.size() > 1 && text.back() == '0' && text[text.size() - 2] != '.') text.pop_back();
  return text + " " + kNames[i];
}

namespace {

// DeepSpeed's trim_mean(data, 0.1): drop round(10%) at each end of the sorted values.
double trim_mean(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto n = static_cast<int64_t>(v.size());
  const auto k = static_cast<int64_t>(std::nearbyint(static_cast<double>(n) * 0.1));
  double sum = 0;
  for (int64_t i = k; i < n - k; ++i) sum += v[static_cast<size_t>(i)];
  return sum / static_cast<double>(n - 2 * k);
}

}  // namespace

CommsLogger::CommsLogger(CommsLoggerOptions options, int rank)
    : options_(std::move(options)), rank_(rank) {}

bool CommsLogger::profiles(const std::string& op) const {
  if (!options_.enabled) return false;
  return options_.prof_all || std::find(options_.prof_ops.begin(), options_.prof_ops.end(), op) !=
                                  options_.prof_ops.end();
}

void CommsLogger::append(const std::string& op, const std::string& record_name, double latency_ms,
                         int64_t msg_bytes, int n) {
  const Bandwidth bw = calc_bw_log(op, msg_bytes, latency_ms, n);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = records_.find(record_name);
    if (it == records_.end()) {
      order_.push_back(record_name);
      it = records_.emplace(record_name, std::map<int64_t, Samples>{}).first;
    }
    Samples& s = it->second[msg_bytes];
    s.count += 1;
    s.latency_ms.push_back(latency_ms);
    s.algbw.push_back(bw.algbw_gbps);
    s.busbw.push_back(bw.busbw_gbps);
  }
  if (options_.verbose && rank_ == 0) {
    char line[512];
    std::snprintf(line, sizeof(line),
                  "comm op: %s | time (ms): %.2f | msg size: %s | algbw (Gbps): %.2f | busbw "
                  "(Gbps): %.2f",
                  record_name.c_str(), latency_ms, convert_size(msg_bytes).c_str(), bw.algbw_gbps,
                  bw.busbw_gbps);
    ZT_LOG_INFO(line);
  }
}

std::vector<CommsLogger::Row> CommsLogger::summary() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Row> rows;
  for (const std::string& name : order_) {
    for (const auto& [bytes, s] : records_.at(name)) {
      Row r;
      r.record_name = name;
      r.msg_bytes = bytes;
      r.count = s.count;
      r.total_bytes = bytes * s.count;
      for (double l : s.latency_ms) r.total_latency_ms += l;
      r.avg_latency_ms = trim_mean(s.latency_ms);
      r.algbw_gbps = trim_mean(s.algbw);
      r.busbw_gbps = trim_mean(s.busbw);
      rows.push_back(std::move(r));
    }
  }
  return rows;
}

std::string CommsLogger::table() const {
  char line[256];
  std::snprintf(line, sizeof(line), "%-20s%-20s%-20s%-20s%-20s%-20s%-20s\n", "Comm. Op",
                "Message Size", "Count", "Total Latency(ms)", "Avg Latency(ms)", "tput_avg (Gbps)",
                "busbw_avg (Gbps)");
  std::string out = line;
  std::string current;
  for (const Row& r : summary()) {
    if (r.record_name != current) {
      current = r.record_name;
      out += current + "\n";
    }
    std::snprintf(line, sizeof(line), "%-20s%-20s%-20lld%-20.2f%-20.2f%-20.2f%-20.2f\n", " ",
                  convert_size(r.msg_bytes).c_str(), static_cast<long long>(r.count),
                  r.total_latency_ms, r.avg_latency_ms, r.algbw_gbps, r.busbw_gbps);
    out += line;
  }
  return out;
}

std::map<std::string, CommsLogger::Row> CommsLogger::per_op() const {
  std::map<std::string, Row> out;
  for (const Row& r : summary()) {
    Row& o = out[r.record_name];
    o.record_name = r.record_name;
    o.count += r.count;
    o.total_latency_ms += r.total_latency_ms;
    o.total_bytes += r.total_bytes;
    // Bandwidth over all sizes: weighted by count, as the monitors plot one line per op.
    o.algbw_gbps += r.algbw_gbps * static_cast<double>(r.count);
    o.busbw_gbps += r.busbw_gbps * static_cast<double>(r.count);
  }
  for (auto& [name, o] : out) {
    const auto c = static_cast<double>(o.count);
    o.avg_latency_ms = o.total_latency_ms / c;
    o.algbw_gbps /= c;
    o.busbw_gbps /= c;
  }
  return out;
}

void CommsLogger::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  order_.clear();
  records_.clear();
}

}  // namespace zt::dist
