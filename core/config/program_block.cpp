#include "core/config/program_block.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <yaml-cpp/yaml.h>

#include "core/config/passes.h"
#include "core/config/reader.h"

namespace zt {

struct ProgramBlock::Impl {
  YAML::Node node;  // a mapping, owned (cloned from the file's tree)
};

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(ch));
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

// A plain YAML scalar as JSON: null, a boolean, a number (integers exactly, others in the
// shortest form that reads back to the same double), else a string. Quoted scalars stay strings.
std::string scalar_json(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return json_string(s);
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return "null";
  if (s == "true" || s == "True" || s == "TRUE") return "true";
  if (s == "false" || s == "False" || s == "FALSE") return "false";
  char* end = nullptr;
  errno = 0;
  const long long i = std::strtoll(s.c_str(), &end, 10);
  if (errno == 0 && end == s.c_str() + s.size()) return std::to_string(i);
  errno = 0;
  const double d = std::strtod(s.c_str(), &end);
  bool decimal = end == s.c_str() + s.size() && errno == 0 && std::isfinite(d);
  for (char ch : s) {
    decimal = decimal && (std::isdigit(static_cast<unsigned char>(ch)) || ch == '.' || ch == 'e' ||
                          ch == 'E' || ch == '+' || ch == '-');
  }
  if (!decimal) return json_string(s);
  char buf[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  return buf;
}

std::string node_json(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      std::string out = "{";
      for (const auto& kv : n) {
        if (out.size() > 1) out += ",";
        out += json_string(kv.first.Scalar()) + ":" + node_json(kv.second);
      }
      return out + "}";
    }
    case YAML::NodeType::Sequence: {
      std::string out = "[";
      for (size_t i = 0; i < n.size(); ++i) out += (i ? "," : "") + node_json(n[i]);
      return out + "]";
    }
    case YAML::NodeType::Scalar: return scalar_json(n);
    default: return "null";
  }
}

}  // namespace

ProgramBlock ProgramBlock::from_yaml(std::string name, const YAML::Node& block) {
  ProgramBlock b;
  b.name_ = std::move(name);
  b.impl_ = std::make_shared<const Impl>(
      Impl{block.IsMap() ? YAML::Clone(block) : YAML::Node(YAML::NodeType::Map)});
  return b;
}

bool ProgramBlock::has(const std::string& key) const {
  if (!impl_) return false;
  for (const auto& kv : impl_->node) {
    if (kv.first.Scalar() == key) return true;
  }
  return false;
}

std::vector<std::string> ProgramBlock::keys() const {
  std::vector<std::string> out;
  if (!impl_) return out;
  for (const auto& kv : impl_->node) out.push_back(kv.first.Scalar());
  return out;
}

std::string ProgramBlock::to_json() const {
  return impl_ ? node_json(impl_->node) : "{}";
}

ProgramBlockReader::ProgramBlockReader(const ProgramBlock& block) : block_(block) {}
ProgramBlockReader::~ProgramBlockReader() = default;

std::string ProgramBlockReader::path(const char* key) const {
  return block_.name_.empty() ? std::string(key) : block_.name_ + "." + key;
}

namespace {

// The value of `key` in the block's tree (an undefined node when absent).
template <typename T>
void read_field(const ProgramBlock::Impl* impl, const std::string& key, const std::string& path,
                T& value, std::vector<std::string>& errors) {
  if (impl == nullptr) return;
  for (const auto& kv : impl->node) {
    if (kv.first.Scalar() != key) continue;
    config_detail::ReadState st;
    config_detail::read_value(kv.second, path, value, st);
    errors.insert(errors.end(), st.errors.begin(), st.errors.end());
    return;
  }
}

}  // namespace

#define ZT_PROGRAM_BLOCK_FIELD(T)                                   \
  void ProgramBlockReader::field(const char* key, T& value) {       \
    known_.emplace_back(key);                                       \
    read_field(block_.impl_.get(), key, path(key), value, errors_); \
  }
ZT_PROGRAM_BLOCK_FIELD(bool)
ZT_PROGRAM_BLOCK_FIELD(int64_t)
ZT_PROGRAM_BLOCK_FIELD(double)
ZT_PROGRAM_BLOCK_FIELD(std::string)
ZT_PROGRAM_BLOCK_FIELD(std::vector<double>)
ZT_PROGRAM_BLOCK_FIELD(std::vector<std::string>)
#undef ZT_PROGRAM_BLOCK_FIELD

void ProgramBlockReader::at_least(const char* key, int64_t value, int64_t min) {
  check(value >= min, key, "must be >= ", min, ", got ", value);
}

void ProgramBlockReader::error(const char* key, const std::string& message) {
  errors_.push_back(path(key) + ": " + message);
}

void ProgramBlockReader::finish() {
  for (const std::string& key : block_.keys()) {
    bool known = false;
    for (const auto& k : known_) known = known || k == key;
    if (known) continue;
    std::string msg = path(key.c_str()) + ": unknown key";
    const std::string near = config_detail::closest_name(key, known_);
    if (!near.empty()) msg += "; did you mean '" + near + "'?";
    errors_.push_back(msg);
  }
  if (errors_.empty()) return;
  std::string joined;
  for (const auto& e : errors_) joined += (joined.empty() ? "" : "; ") + e;
  const size_t n = errors_.size();
  ZT_THROW("config `", block_.name_, "` block: ", n, n == 1 ? " error: " : " errors: ", joined);
}

}  // namespace zt
