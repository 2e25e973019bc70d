#pragma once
// ConfigReader: the visitor that reads one YAML mapping (one block of a config) into typed
// fields (see core/config/schema.h for the visitor shape). It records which keys were given, which
// were "auto" and which were rejected in ReadState, and at finish() turns every key nobody
// asked for into an error with a suggestion, or a warning when it is a DeepSpeed key we do not
// implement. Internal to the config files.

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include <yaml-cpp/yaml.h>

#include "core/config/passes.h"
#include "core/config/schema.h"

namespace zt::config_detail {

using config_schema::EnumName;
using config_schema::FieldOptions;
using config_schema::Unsupported;
using config_schema::UnsupportedKey;

// Scalar conversions; each returns false after appending "<path>: expected ..., got ..." to
// errors. Booleans must be plain true/false; integers accept 2e8 but not 2.5.
bool read_value(const YAML::Node& n, const std::string& path, bool& out, ReadState& st);
bool read_value(const YAML::Node& n, const std::string& path, int& out, ReadState& st);
bool read_value(const YAML::Node& n, const std::string& path, int64_t& out, ReadState& st);
bool read_value(const YAML::Node& n, const std::string& path, double& out, ReadState& st);
bool read_value(const YAML::Node& n, const std::string& path, std::string& out, ReadState& st);
bool read_value(const YAML::Node& n, const std::string& path, std::optional<int64_t>& out,
                ReadState& st);
bool read_value(const YAML::Node& n, const std::string& path, std::vector<double>& out,
                ReadState& st);
bool read_value(const YAML::Node& n, const std::string& path, std::vector<int64_t>& out,
                ReadState& st);
bool read_value(const YAML::Node& n, const std::string& path, std::vector<std::string>& out,
                ReadState& st);
// Any value (null leaves `out` empty).
bool read_value(const YAML::Node& n, const std::string& path, JsonText& out, ReadState& st);
// How a value looks in messages: 2.5, "true" (a string), a block, a list, null.
std::string describe(const YAML::Node& n);
bool is_auto(const YAML::Node& n);
// Case-insensitive name lookup; returns the index into names or -1.
int match_name(const std::string& text, const std::vector<std::string>& names);

class ConfigReader {
 public:
  // `map` must be a mapping; `path` is its key path ("" for the root).
  ConfigReader(const YAML::Node& map, std::string path, ReadState& state);

  template <typename T>
  void field(const char* key, T& value, const FieldOptions& opts) {
    std::optional<YAML::Node> found = take(key, opts);
    if (!found) return;
    const YAML::Node& n = *found;
    const std::string path = child_path(key);
    if (is_auto(n)) {
      accept_auto(path, opts);
      return;
    }
    if (!read_value(n, path, value, state_)) state_.failed.insert(path);
  }

  template <typename E, std::size_t N>
  void choice(const char* key, E& value, const EnumName<E> (&names)[N], const FieldOptions& opts) {
    std::optional<YAML::Node> found = take(key, opts);
    if (!found) return;
    const YAML::Node& n = *found;
    read_choice(n, child_path(key), value, names);
  }

  template <typename E, std::size_t N>
  void choice(const char* key, std::optional<E>& value, const EnumName<E> (&names)[N],
              const FieldOptions& opts) {
    std::optional<YAML::Node> found = take(key, opts);
    if (!found) return;
    const YAML::Node& n = *found;
    if (n.IsNull()) {
      value.reset();
      return;
    }
    E v{};
    if (read_choice(n, child_path(key), v, names)) value = v;
  }

  template <typename Fn>
  void block(const char* key, Fn&& fn, const FieldOptions& opts) {
    std::optional<YAML::Node> found = take(key, opts);
    if (!found) return;
    const YAML::Node& n = *found;
    const std::string path = child_path(key);
    if (n.IsNull()) return;  // `key: ` with nothing under it: all defaults
    if (!n.IsMap()) {
      bad_block(path, n);
      return;
    }
    // The params of a type already rejected (an optimizer we do not have): checking them against
    // another type's keys would only add noise.
    if (key == std::string("params") && state_.failed.count(child_path("type"))) return;
    ConfigReader child(n, path, state_);
    fn(child);
    child.finish();
  }

  template <typename T, typename Fn>
  void optional_block(const char* key, std::optional<T>& value, Fn&& fn) {
    if (!has(key)) return;
    T inner{};
    bool is_map = false;
    block(key,
          [&](ConfigReader& w) {
            is_map = true;
            fn(w, inner);
          },
          {});
    if (is_map) value = inner;
  }

  void unsupported(std::initializer_list<UnsupportedKey> keys) {
    unsupported_.insert(unsupported_.end(), keys.begin(), keys.end());
  }
  void unknown_keys_warn() { unknown_keys_warn_ = true; }

  // The root's program blocks (program_block.h): untaken keys holding a block that are neither
  // near misses of schema keys nor schema keys of another block. Marks them taken.
  std::vector<std::pair<std::string, YAML::Node>> take_program_blocks();

  // Reports keys of this block that no field took.
  void finish();

 private:
  struct Entry {
    std::string key;
    YAML::Node value;
    bool taken = false;
  };

  std::string child_path(const std::string& key) const;
  bool has(const char* key) const;
  // The value under key (or one of its older names), marked as taken; nullopt if absent.
  std::optional<YAML::Node> take(const char* key, const FieldOptions& opts);
  void accept_auto(const std::string& path, const FieldOptions& opts);
  void bad_block(const std::string& path, const YAML::Node& n);
  bool read_choice_index(const YAML::Node& n, const std::string& path,
                         const std::vector<std::string>& names, int& index);

  template <typename E, std::size_t N>
  bool read_choice(const YAML::Node& n, const std::string& path, E& value,
                   const EnumName<E> (&names)[N]) {
    std::vector<std::string> text;
    for (const auto& name : names) text.emplace_back(name.name);
    int index = -1;
    if (!read_choice_index(n, path, text, index)) {
      state_.failed.insert(path);
      return false;
    }
    value = names[index].value;
    return true;
  }

  std::vector<Entry> entries_;
  std::string path_;
  ReadState& state_;
  std::vector<std::string> known_;  // keys fields asked for, for suggestions
  std::vector<UnsupportedKey> unsupported_;
  bool unknown_keys_warn_ = false;
};

}  // namespace zt::config_detail
