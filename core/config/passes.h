#pragma once
// The passes check_config runs over a config, in order (internal to the config files):
//   apply_overrides   --set a.b=v edits of the YAML tree        (overrides.cpp)
//   read_config       YAML tree -> typed Config, key by key      (reader.cpp)
//   resolve_config    "auto", the batch triple, derived defaults (resolve.cpp)
//   validate_config   ranges and cross-field rules               (validate.cpp)
// Every pass appends one-line messages, each starting with the key path it is about, and goes
// on after an error, so one run reports every problem of a file.

#include <set>
#include <string>
#include <vector>
#include <yaml-cpp/yaml.h>

#include "core/config/config.h"

namespace zt::config_detail {

// What reading learnt besides the values, by full key path ("zero_optimization.stage"; older
// names are recorded under the current one).
struct ReadState {
  std::vector<std::string> errors;
  std::vector<std::string> warnings;
  std::set<std::string> present;  // keys the file (or --set) gave, "auto" included
  std::set<std::string> autos;    // keys given as "auto" (their field still holds the default)
  // Keys whose value was rejected, or is a pending "auto" (later passes skip them).
  std::set<std::string> failed;
  std::vector<std::string> auto_notes;  // ConfigReport::autos

  // Given with a usable value: present, not "auto", not rejected.
  bool given(const std::string& path) const {
    return present.count(path) && !autos.count(path) && !failed.count(path);
  }
};

// DeepSpeed's older forms, rewritten in the YAML tree to today's (legacy.cpp):
// "zero_optimization": true/false, cpu_offload / cpu_offload_param / cpu_offload_use_pin_memory.
// Each rewrite adds one warning naming the old key and its replacement.
void apply_legacy_forms(YAML::Node& root, ReadState& state);
void apply_overrides(YAML::Node& root, const std::vector<std::string>& overrides,
                     std::vector<std::string>& errors);
void read_config(const YAML::Node& root, Config& config, ReadState& state);
void resolve_config(Config& config, ReadState& state, const ProgramValues& program, int world_size);
void validate_config(const Config& config, ReadState& state);
// Keys read into Config that the engine does not act on: a warning when the value given is not
// what zerotorch does anyway (validate.cpp).
void warn_inert_keys(const Config& config, ReadState& state);

// A YAML tree as JSON (program blocks, program_block.h): plain scalars that read as numbers,
// booleans or null are written as such, everything else as strings.
std::string yaml_to_json(const YAML::Node& node);

// The name in `candidates` closest to `word` (case-insensitive edit distance, transpositions
// count one), or "" when none is close enough to be a plausible typo.
std::string closest_name(const std::string& word, const std::vector<std::string>& candidates);

// s in lower case (ASCII): DeepSpeed matches optimizer and scheduler names case-insensitively.
std::string lower(const std::string& s);

}  // namespace zt::config_detail
