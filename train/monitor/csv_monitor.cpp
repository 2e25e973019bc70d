#include "train/monitor/csv_monitor.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "base/error.h"

namespace zt {
namespace {

std::string file_name_of(const std::string& name) {
  std::string f = name;
  for (char& ch : f) {
    if (ch == '/' || ch == ' ') ch = '_';
  }
  return f + ".csv";
}

std::string header_of(const std::string& name) {
  const size_t slash = name.rfind('/');
  return slash == std::string::npos ? name : name.substr(slash + 1);
}

// Python's csv module quotes a field holding the delimiter, a quote or a line break.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

}  // namespace

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  // Shortest round-tripping digits, as d.ddde<exp>.
  char buf[40];
  for (int precision = 0; precision <= 16; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*e", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  const bool negative = s[0] == '-';
  if (negative) s = s.substr(1);
  const size_t e = s.find('e');
  const int exp = std::atoi(s.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (s[i] != '.') digits += s[i];
  }
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += ebuf;
  }
  return negative ? "-" + out : out;
}

CsvMonitor::CsvMonitor(std::string log_dir) : log_dir_(std::move(log_dir)) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir_, ec);
  ZT_CHECK(!ec, "csv_monitor: cannot create ", log_dir_, " (output_path/job_name): ", ec.message());
}

CsvMonitor::~CsvMonitor() {
  for (auto& [name, f] : files_) std::fclose(f);
}

void CsvMonitor::write(int64_t step, const std::string& name, double value) {
  const std::string file = file_name_of(name);
  auto it = files_.find(file);
  if (it == files_.end()) {
    const std::string path = log_dir_ + "/" + file;
    std::FILE* f = std::fopen(path.c_str(), "ab");
    ZT_CHECK(f != nullptr, "csv_monitor: cannot open ", path, ": ", std::strerror(errno));
    it = files_.emplace(file, f).first;
    const std::string header = "step," + csv_field(header_of(name)) + "\r\n";
    std::fwrite(header.data(), 1, header.size(), f);
  }
  const std::string row = std::to_string(step) + "," + python_float_repr(value) + "\r\n";
  std::fwrite(row.data(), 1, row.size(), it->second);
}

void CsvMonitor::flush() {
  for (auto& [name, f] : files_) std::fflush(f);
}

}  // namespace zt
