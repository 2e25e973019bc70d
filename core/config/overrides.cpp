// --set overrides: "a.b.c=value" edits the YAML tree before anything is read, so an override
// is checked exactly like the same key written in the file.
#include <string>
#include <vector>

#include "base/error.h"
#include "core/config/passes.h"

namespace zt::config_detail {
namespace {

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    parts.push_back(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return parts;
}

// Applies one override; returns an error message or "".
std::string apply_one(YAML::Node& root, const std::string& text) {
  const std::string where = "--set " + text;
  size_t eq = text.find('=');
  if (eq == std::string::npos)
    return where + ": expected key=value (e.g. zero_optimization.stage=3)";
  const std::string path = text.substr(0, eq);
  const std::string raw = text.substr(eq + 1);
  std::vector<std::string> parts = split_path(path);
  for (const auto& part : parts) {
    if (part.empty()) return where + ": empty key name in '" + path + "'";
  }
  if (raw.empty()) return where + ": missing value after '='";
  YAML::Node value;
  try {
    value = YAML::Load(raw);
  } catch (const YAML::Exception& e) {
    return where + ": cannot read the value: " + e.msg;
  }
  if (!root.IsMap()) {
    if (!root.IsNull()) return where + ": the config is not a block of keys";
    root = YAML::Node(YAML::NodeType::Map);
  }
  // Node assignment in yaml-cpp writes through to the tree; reset() rebinds the handle instead.
  YAML::Node cur;
  cur.reset(root);
  std::string walked;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    walked += (walked.empty() ? "" : ".") + parts[i];
    YAML::Node next = cur[parts[i]];
    if (!next.IsDefined() || next.IsNull()) {
      cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
      next.reset(cur[parts[i]]);
    } else if (!next.IsMap()) {
      return where + ": " + walked + " is not a block of keys";
    }
    cur.reset(next);
  }
  cur[parts.back()] = value;
  return "";
}

}  // namespace

void apply_overrides(YAML::Node& root, const std::vector<std::string>& overrides,
                     std::vector<std::string>& errors) {
  for (const auto& text : overrides) {
    std::string error = apply_one(root, text);
    if (!error.empty()) errors.push_back(error);
  }
}

}  // namespace zt::config_detail
