// Config -> JSON through the schema's field list, so every field is written and the output
// reads back to an equal Config; program blocks (program_block.h) are written from their YAML
// trees. Doubles are written in the shortest form that reads back to
// the same bits.
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/config/passes.h"
#include "core/config/schema.h"

namespace zt {
namespace {

using config_schema::EnumName;
using config_schema::FieldOptions;

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

std::string json_number(double v) {
  char buf[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
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
  return json_number(d);
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

class JsonWriter {
 public:
  explicit JsonWriter(bool pretty) : pretty_(pretty) {}

  void field(const char* key, const bool& v, const FieldOptions&) {
    put(key, v ? "true" : "false");
  }
  void field(const char* key, const int& v, const FieldOptions&) { put(key, std::to_string(v)); }
  void field(const char* key, const int64_t& v, const FieldOptions&) {
    put(key, std::to_string(v));
  }
  void field(const char* key, const double& v, const FieldOptions&) { put(key, json_number(v)); }
  void field(const char* key, const std::string& v, const FieldOptions&) {
    put(key, json_string(v));
  }
  void field(const char* key, const JsonText& v, const FieldOptions&) {
    put(key, v.empty() ? "null" : v.text);
  }
  void field(const char* key, const std::optional<int64_t>& v, const FieldOptions&) {
    put(key, v ? std::to_string(*v) : "null");
  }
  void field(const char* key, const std::vector<double>& v, const FieldOptions&) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? sep() : "") + json_number(v[i]);
    put(key, s + "]");
  }
  void field(const char* key, const std::vector<int64_t>& v, const FieldOptions&) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? sep() : "") + std::to_string(v[i]);
    put(key, s + "]");
  }
  void field(const char* key, const std::vector<std::string>& v, const FieldOptions&) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? sep() : "") + json_string(v[i]);
    put(key, s + "]");
  }

  template <typename E, std::size_t N>
  void choice(const char* key, const E& v, const EnumName<E> (&names)[N], const FieldOptions&) {
    put(key, json_string(config_schema::name_of(v, names)));
  }
  template <typename E, std::size_t N>
  void choice(const char* key, const std::optional<E>& v, const EnumName<E> (&names)[N],
              const FieldOptions&) {
    put(key, v ? json_string(config_schema::name_of(*v, names)) : "null");
  }

  template <typename Fn>
  void block(const char* key, Fn&& fn, const FieldOptions&) {
    put(key, "");
    open();
    fn(*this);
    close();
  }
  template <typename T, typename Fn>
  void optional_block(const char* key, std::optional<T>& v, Fn&& fn) {
    if (v) block(key, [&](JsonWriter& w) { fn(w, *v); }, {});
  }
  void unsupported(std::initializer_list<config_schema::UnsupportedKey>) {}
  void unknown_keys_warn() {}

  // A value already written as JSON (a program block).
  void raw(const std::string& key, const std::string& json) { put(key.c_str(), json); }

  void open() {
    out_ += "{";
    first_.push_back(true);
  }
  void close() {
    first_.pop_back();
    if (pretty_) out_ += "\n" + std::string(2 * first_.size(), ' ');
    out_ += "}";
  }
  std::string str() const { return out_; }

 private:
  // Starts `"key": ` on its own line and appends value ("" for a block that follows).
  void put(const char* key, const std::string& value) {
    if (!first_.back()) out_ += ",";
    first_.back() = false;
    if (pretty_) out_ += "\n" + std::string(2 * first_.size(), ' ');
    out_ += json_string(key) + (pretty_ ? ": " : ":") + value;
  }

  const char* sep() const { return pretty_ ? ", " : ","; }

  bool pretty_;
  std::string out_;
  std::vector<bool> first_;
};

}  // namespace

namespace config_detail {

std::string yaml_to_json(const YAML::Node& node) {
  return node_json(node);
}

}  // namespace config_detail

std::string Config::to_json(bool pretty) const {
  JsonWriter writer(pretty);
  writer.open();
  // The writer only reads; the schema's visit functions take mutable references so that the
  // reader can share them.
  config_schema::visit_config(writer, const_cast<Config&>(*this));
  for (const auto& [name, block] : program_blocks) writer.raw(name, block.to_json());
  writer.close();
  return writer.str();
}

ProgramBlock Config::program_block(const std::string& name) const {
  auto it = program_blocks.find(name);
  return it == program_blocks.end() ? ProgramBlock(name) : it->second;
}

bool operator==(const Config& a, const Config& b) {
  return a.world_size == b.world_size && a.to_json(false) == b.to_json(false);
}

}  // namespace zt
