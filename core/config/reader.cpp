#include "core/config/reader.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "base/error.h"

namespace zt::config_detail {
namespace {

bool is_plain_scalar(const YAML::Node& n) {
  return n.IsScalar() && n.Tag() != "!";
}

void fail(ReadState& st, const std::string& path, const std::string& expected,
          const YAML::Node& n) {
  st.errors.push_back(detail::str(path, ": expected ", expected, ", got ", describe(n)));
}

// The whole text as a finite double (strtod accepts a prefix; we want all of it).
bool parse_double(const std::string& text, double& out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v)) return false;
  // strtod also reads hex floats and "infinity"; config numbers are decimal.
  for (char ch : text) {
    if (!(std::isdigit(static_cast<unsigned char>(ch)) || ch == '.' || ch == 'e' || ch == 'E' ||
          ch == '+' || ch == '-')) {
      return false;
    }
  }
  out = v;
  return true;
}

// Collects the full path of every key of the schema (default optimizer and scheduler types), so
// that a key written in the wrong block can be pointed to its place.
class KeyCollector {
 public:
  template <typename T>
  void field(const char* key, T&, const FieldOptions&) {
    add(key);
  }
  template <typename T, typename E, std::size_t N>
  void choice(const char* key, T&, const EnumName<E> (&)[N], const FieldOptions&) {
    add(key);
  }
  template <typename Fn>
  void block(const char* key, Fn&& fn, const FieldOptions&) {
    add(key);
    const std::string saved = prefix_;
    prefix_ = path(key);
    fn(*this);
    prefix_ = saved;
  }
  template <typename T, typename Fn>
  void optional_block(const char* key, std::optional<T>&, Fn&& fn) {
    T inner{};
    block(key, [&](KeyCollector& w) { fn(w, inner); }, {});
  }
  void unsupported(std::initializer_list<UnsupportedKey>) {}
  void unknown_keys_warn() {}

  const std::vector<std::string>& paths() const { return paths_; }

 private:
  std::string path(const char* key) const { return prefix_.empty() ? key : prefix_ + "." + key; }
  void add(const char* key) { paths_.push_back(path(key)); }

  std::string prefix_;
  std::vector<std::string> paths_;
};

const std::vector<std::string>& all_key_paths() {
  static const std::vector<std::string> paths = [] {
    KeyCollector collector;
    Config config;
    config_schema::visit_config(collector, config);
    return collector.paths();
  }();
  return paths;
}

// The full path of a schema key named `key` in another block, or "".
std::string elsewhere(const std::string& key, const std::string& path) {
  const std::string k = lower(key);
  for (const auto& p : all_key_paths()) {
    const size_t dot = p.rfind('.');
    const std::string last = dot == std::string::npos ? p : p.substr(dot + 1);
    if (lower(last) == k && p != path) return p;
  }
  return "";
}

}  // namespace

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null: return "null";
    case YAML::NodeType::Map: return "a block";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Scalar:
      if (n.Tag() == "!") return "\"" + n.Scalar() + "\" (a string)";
      return n.Scalar();
    default: return "nothing";
  }
}

bool is_auto(const YAML::Node& n) {
  return n.IsScalar() && n.Scalar() == "auto";
}

int match_name(const std::string& text, const std::vector<std::string>& names) {
  const std::string t = lower(text);
  for (size_t i = 0; i < names.size(); ++i) {
    if (lower(names[i]) == t) return static_cast<int>(i);
  }
  return -1;
}

bool read_value(const YAML::Node& n, const std::string& path, bool& out, ReadState& st) {
  if (is_plain_scalar(n)) {
    const std::string& s = n.Scalar();
    if (s == "true" || s == "True" || s == "TRUE") {
      out = true;
      return true;
    }
    if (s == "false" || s == "False" || s == "FALSE") {
      out = false;
      return true;
    }
  }
  fail(st, path, "a boolean (true or false)", n);
  return false;
}

bool read_value(const YAML::Node& n, const std::string& path, int64_t& out, ReadState& st) {
  double v = 0;
  if (!is_plain_scalar(n) || !parse_double(n.Scalar(), v)) {
    fail(st, path, "an integer", n);
    return false;
  }
  // Exact for integers written in full (beyond 2^53 a double would round them).
  char* end = nullptr;
  errno = 0;
  long long exact = std::strtoll(n.Scalar().c_str(), &end, 10);
  if (errno == 0 && end == n.Scalar().c_str() + n.Scalar().size()) {
    out = exact;
    return true;
  }
  if (std::floor(v) != v) {
    fail(st, path, "an integer", n);
    return false;
  }
  // 2^63 is the first double past int64's range.
  if (v >= 9223372036854775808.0 || v < -9223372036854775808.0) {
    st.errors.push_back(detail::str(path, ": ", n.Scalar(), " does not fit a 64-bit integer"));
    return false;
  }
  out = static_cast<int64_t>(v);
  return true;
}

bool read_value(const YAML::Node& n, const std::string& path, int& out, ReadState& st) {
  int64_t v = 0;
  if (!read_value(n, path, v, st)) return false;
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    st.errors.push_back(detail::str(path, ": ", n.Scalar(), " does not fit a 32-bit integer"));
    return false;
  }
  out = static_cast<int>(v);
  return true;
}

bool read_value(const YAML::Node& n, const std::string& path, double& out, ReadState& st) {
  if (!is_plain_scalar(n) || !parse_double(n.Scalar(), out)) {
    fail(st, path, "a number", n);
    return false;
  }
  return true;
}

bool read_value(const YAML::Node& n, const std::string& path, std::string& out, ReadState& st) {
  if (n.IsNull()) {
    out.clear();
    return true;
  }
  if (!n.IsScalar()) {
    fail(st, path, "a string", n);
    return false;
  }
  out = n.Scalar();
  return true;
}

bool read_value(const YAML::Node& n, const std::string& path, std::optional<int64_t>& out,
                ReadState& st) {
  if (n.IsNull()) {
    out.reset();
    return true;
  }
  int64_t v = 0;
  if (!read_value(n, path, v, st)) return false;
  out = v;
  return true;
}

bool read_value(const YAML::Node& n, const std::string& path, std::vector<double>& out,
                ReadState& st) {
  if (!n.IsSequence()) {
    fail(st, path, "a list of numbers", n);
    return false;
  }
  std::vector<double> values;
  for (size_t i = 0; i < n.size(); ++i) {
    double v = 0;
    if (!read_value(n[i], detail::str(path, "[", i, "]"), v, st)) return false;
    values.push_back(v);
  }
  out = values;
  return true;
}

bool read_value(const YAML::Node& n, const std::string& path, std::vector<int64_t>& out,
                ReadState& st) {
  if (!n.IsSequence()) {
    fail(st, path, "a list of integers", n);
    return false;
  }
  std::vector<int64_t> values;
  for (size_t i = 0; i < n.size(); ++i) {
    int64_t v = 0;
    if (!read_value(n[i], detail::str(path, "[", i, "]"), v, st)) return false;
    values.push_back(v);
  }
  out = values;
  return true;
}

bool read_value(const YAML::Node& n, const std::string& path, std::vector<std::string>& out,
                ReadState& st) {
  if (!n.IsSequence()) {
    fail(st, path, "a list of strings", n);
    return false;
  }
  std::vector<std::string> values;
  for (size_t i = 0; i < n.size(); ++i) {
    if (!n[i].IsScalar()) {
      fail(st, detail::str(path, "[", i, "]"), "a string", n[i]);
      return false;
    }
    values.push_back(n[i].Scalar());
  }
  out = values;
  return true;
}

bool read_value(const YAML::Node& n, const std::string& /*path*/, JsonText& out,
                ReadState& /*st*/) {
  out.text = n.IsNull() ? "" : config_detail::yaml_to_json(n);
  return true;
}

ConfigReader::ConfigReader(const YAML::Node& map, std::string path, ReadState& state)
    : path_(std::move(path)), state_(state) {
  for (const auto& kv : map) {
    // Keys that are not scalars ({[1]: x}) cannot name a field; show them as YAML.
    std::string key = kv.first.IsScalar() ? kv.first.Scalar() : YAML::Dump(kv.first);
    entries_.push_back({key, kv.second, false});
  }
}

std::string ConfigReader::child_path(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

bool ConfigReader::has(const char* key) const {
  for (const auto& e : entries_) {
    if (e.key == key) return true;
  }
  return false;
}

std::optional<YAML::Node> ConfigReader::take(const char* key, const FieldOptions& opts) {
  std::optional<YAML::Node> found;
  std::string found_name;
  for (const char* name : {key, opts.alias, opts.alias2}) {
    if (name == nullptr) continue;
    known_.emplace_back(name);
    for (auto& e : entries_) {
      if (e.key != name) continue;
      e.taken = true;
      if (!found) {
        found = e.value;
        found_name = name;
      } else if (YAML::Dump(*found) != YAML::Dump(e.value)) {
        // Both names given: only a contradiction is an error.
        state_.errors.push_back(detail::str(child_path(name), ": conflicts with ",
                                            child_path(found_name), " (", describe(e.value), " vs ",
                                            describe(*found), "); give one of them"));
        state_.failed.insert(child_path(key));
      }
    }
  }
  if (found) state_.present.insert(child_path(key));
  return found;
}

void ConfigReader::accept_auto(const std::string& path, const FieldOptions& opts) {
  if (opts.allow_auto) {
    state_.autos.insert(path);
    return;
  }
  state_.errors.push_back(path + ": \"auto\" is not allowed here; give a value");
  state_.failed.insert(path);
}

void ConfigReader::bad_block(const std::string& path, const YAML::Node& n) {
  state_.errors.push_back(detail::str(path, ": expected a block of keys, got ", describe(n)));
  state_.failed.insert(path);
}

bool ConfigReader::read_choice_index(const YAML::Node& n, const std::string& path,
                                     const std::vector<std::string>& names, int& index) {
  std::string one_of;
  for (const auto& name : names) one_of += (one_of.empty() ? "" : ", ") + name;
  if (!n.IsScalar()) {
    fail(state_, path, "one of " + one_of, n);
    return false;
  }
  index = match_name(n.Scalar(), names);
  if (index >= 0) return true;
  if (path == "optimizer.type") {
    for (const auto& refused : config_schema::kRefusedOptimizers) {
      if (lower(refused.name) != lower(n.Scalar())) continue;
      state_.errors.push_back(detail::str(path, ": '", n.Scalar(), "' is not implemented by ",
                                          "zerotorch (", refused.why, "); available: ", one_of));
      return false;
    }
  }
  std::string msg = detail::str(path, ": expected one of ", one_of, ", got '", n.Scalar(), "'");
  std::string near = closest_name(n.Scalar(), names);
  if (!near.empty()) msg += "; did you mean '" + near + "'?";
  state_.errors.push_back(msg);
  return false;
}

namespace {

// True when an unsupported key's value asks for nothing zerotorch does not do (see
// config_schema::UnsupportedKey).
bool means_off(const YAML::Node& n, const UnsupportedKey& u) {
  if (n.IsNull()) return true;
  if (u.same != nullptr) return n.IsScalar() && lower(n.Scalar()) == lower(u.same);
  if (n.IsScalar()) return lower(n.Scalar()) == "false";
  if (n.IsMap()) {
    if (n.size() == 0) return true;
    const YAML::Node enabled = n["enabled"];
    return enabled.IsDefined() && enabled.IsScalar() && lower(enabled.Scalar()) == "false";
  }
  return false;
}

}  // namespace

std::vector<std::pair<std::string, YAML::Node>> ConfigReader::take_program_blocks() {
  std::vector<std::pair<std::string, YAML::Node>> blocks;
  for (auto& e : entries_) {
    if (e.taken || !e.value.IsMap()) continue;
    bool unsupported = false;  // a DeepSpeed block zerotorch lacks: finish() warns or refuses
    for (const auto& u : unsupported_) unsupported = unsupported || lower(u.key) == lower(e.key);
    if (unsupported) continue;
    if (!closest_name(e.key, known_).empty() || !elsewhere(e.key, child_path(e.key)).empty()) {
      continue;  // a misspelt or misplaced framework key: finish() reports it
    }
    e.taken = true;
    blocks.emplace_back(e.key, e.value);
  }
  return blocks;
}

void ConfigReader::finish() {
  for (const auto& e : entries_) {
    if (e.taken) continue;
    const std::string path = child_path(e.key);
    const UnsupportedKey* u = nullptr;
    for (const auto& candidate : unsupported_) {
      if (lower(candidate.key) == lower(e.key)) u = &candidate;
    }
    if (u != nullptr) {
      if (means_off(e.value, *u)) continue;
      switch (u->kind) {
        case Unsupported::kFeature:
          state_.warnings.push_back(path + ": DeepSpeed feature not in zerotorch (" + u->why +
                                    "); ignored");
          break;
        case Unsupported::kNoEffect:
          state_.warnings.push_back(path + ": no effect in zerotorch (" + u->why + ")");
          break;
        case Unsupported::kRefused:
          state_.errors.push_back(path + ": " + u->why + " (zerotorch will not ignore a setting " +
                                  "that changes memory or numerics; remove it or turn it off)");
          state_.failed.insert(path);
          break;
      }
      continue;
    }
    std::string msg = path + ": unknown key";
    std::string near = closest_name(e.key, known_);
    const std::string moved = elsewhere(e.key, path);
    if (!near.empty()) {
      msg += "; did you mean '" + near + "'?";
    } else if (!moved.empty()) {
      msg += "; did you mean '" + moved + "'?";
    } else if (!known_.empty() && known_.size() <= 12) {
      // A small block (an optimizer's or scheduler's params): listing it is the best hint.
      std::string list;
      for (const auto& k : known_) list += (list.empty() ? "" : ", ") + k;
      msg += " (keys here: " + list + ")";
    }
    if (unknown_keys_warn_) {
      // DeepSpeed ignores it; so do we, saying so once.
      state_.warnings.push_back(msg + "; ignored, as DeepSpeed does");
    } else {
      state_.errors.push_back(msg);
    }
  }
}

void read_config(const YAML::Node& root, Config& config, ReadState& state) {
  if (root.IsNull()) return;  // an empty file: all defaults (the batch rule will complain)
  if (!root.IsMap()) {
    state.errors.push_back("config: expected a block of keys at the top, got " + describe(root));
    return;
  }
  ConfigReader reader(root, "", state);
  config_schema::visit_config(reader, config);
  for (auto& [name, block] : reader.take_program_blocks()) {
    config.program_blocks[name] = ProgramBlock::from_yaml(name, block);
  }
  reader.finish();
}

}  // namespace zt::config_detail
