// Entry points: check_config runs the passes (passes.h) and gathers every message;
// load_config/parse_config turn its report into a Config or one zt::Error.
#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "base/error.h"
#include "base/logging.h"
#include "core/config/config.h"
#include "core/config/hjson.h"
#include "core/config/passes.h"

namespace zt {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

ConfigFormat format_of(const std::string& path) {
  std::string lower = path;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  return ends_with(lower, ".json") ? ConfigFormat::kJson : ConfigFormat::kYaml;
}

Config throw_or_return(ConfigReport report, const std::string& source) {
  for (const auto& w : report.warnings) ZT_LOG_WARN(w);
  if (report.errors.empty()) return *report.config;
  std::string joined;
  for (const auto& e : report.errors) joined += (joined.empty() ? "" : "; ") + e;
  const size_t n = report.errors.size();
  ZT_THROW(source.empty() ? "config" : source, ": ", n, n == 1 ? " error: " : " errors: ", joined);
}

// The text as a YAML tree, or false with the error appended.
bool parse_tree(const std::string& text, ConfigFormat format, YAML::Node& root,
                std::vector<std::string>& errors) {
  // YAML forbids tabs as indentation, JSON does not; a valid JSON text has no raw tab inside a
  // string, so turning every tab into a space keeps its meaning.
  std::string input = text;
  if (format == ConfigFormat::kJson) {
    // DeepSpeed reads JSON configs with hjson: comments, trailing and missing commas.
    config_detail::HjsonResult json = config_detail::hjson_to_json(text);
    if (!json.error.empty()) {
      errors.push_back(json.error);
      return false;
    }
    input = std::move(json.json);
    std::replace(input.begin(), input.end(), '\t', ' ');
  }
  try {
    root = YAML::Load(input);
  } catch (const YAML::Exception& e) {
    // No key to name: the position is the culprit (callers prefix the file name).
    errors.push_back(detail::str("line ", e.mark.line + 1, ", column ", e.mark.column + 1, ": ",
                                 format == ConfigFormat::kJson ? "JSON" : "YAML",
                                 " syntax error: ", e.msg));
    return false;
  }
  return true;
}

}  // namespace

std::vector<std::string> config_file_keys(const std::string& path) {
  std::ifstream in(path);
  ZT_CHECK(static_cast<bool>(in), path, ": cannot open the config file");
  std::stringstream text;
  text << in.rdbuf();
  YAML::Node root;
  std::vector<std::string> errors;
  ZT_CHECK(parse_tree(text.str(), format_of(path), root, errors), path, ": ", errors.front());
  std::vector<std::string> keys;
  if (!root.IsMap()) return keys;
  for (const auto& kv : root) keys.push_back(kv.first.as<std::string>());
  return keys;
}

ConfigReport check_config(const std::string& text, ConfigFormat format,
                          const std::vector<std::string>& overrides, int world_size,
                          const ProgramValues& program) {
  ConfigReport report;
  YAML::Node root;
  if (!parse_tree(text, format, root, report.errors)) return report;
  config_detail::ReadState state;
  config_detail::apply_legacy_forms(root, state);
  config_detail::apply_overrides(root, overrides, state.errors);
  Config config;
  config_detail::read_config(root, config, state);
  config_detail::resolve_config(config, state, program, world_size);
  config_detail::validate_config(config, state);
  config_detail::warn_inert_keys(config, state);
  report.errors = std::move(state.errors);
  report.warnings = std::move(state.warnings);
  report.autos = std::move(state.auto_notes);
  if (report.errors.empty()) report.config = std::move(config);
  return report;
}

ConfigReport check_config_file(const std::string& path, const std::vector<std::string>& overrides,
                               int world_size, const ProgramValues& program) {
  std::ifstream in(path);
  if (!in) {
    ConfigReport report;
    report.errors.push_back(path + ": cannot open the config file");
    return report;
  }
  std::stringstream text;
  text << in.rdbuf();
  return check_config(text.str(), format_of(path), overrides, world_size, program);
}

Config parse_config(const std::string& text, ConfigFormat format,
                    const std::vector<std::string>& overrides, int world_size,
                    const ProgramValues& program) {
  return throw_or_return(check_config(text, format, overrides, world_size, program), "");
}

namespace {

// load_config's logging around a report of `source`.
Config logged(ConfigReport report, const std::string& source, int world_size) {
  for (const auto& line : report.autos) ZT_LOG_INFO("config ", source, ": ", line);
  Config config = throw_or_return(std::move(report), source);
  ZT_LOG_INFO("config ", source, " (world size ", world_size, "): ", config.to_json(false));
  return config;
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   int world_size, const ProgramValues& program) {
  return logged(check_config_file(path, overrides, world_size, program), path, world_size);
}

Config load_config_text(const std::string& json, const std::string& source,
                        const std::vector<std::string>& overrides, int world_size,
                        const ProgramValues& program) {
  return logged(check_config(json, ConfigFormat::kJson, overrides, world_size, program), source,
                world_size);
}

}  // namespace zt
