#include "weights/safetensors_set.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <yaml-cpp/yaml.h>

#include "base/error.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

// weight_map of a Hugging Face index: tensor name -> file name (relative to the index).
std::vector<std::pair<std::string, std::string>> read_weight_map(const std::string& path) {
  std::ifstream in(path);
  ZT_CHECK(in.good(), "cannot read ", path);
  std::stringstream text;
  text << in.rdbuf();
  YAML::Node root;
  try {
    root = YAML::Load(text.str());  // JSON is YAML; yaml-cpp is already the config's reader
  } catch (const YAML::Exception& e) {
    ZT_THROW(path, ": not valid JSON: ", e.what());
  }
  const YAML::Node map = root.IsMap() ? root["weight_map"] : YAML::Node();
  ZT_CHECK(map && map.IsMap(), path, ": no weight_map object");
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& kv : map)
    out.emplace_back(kv.first.as<std::string>(), kv.second.as<std::string>());
  return out;
}

}  // namespace

bool SafetensorsSet::present(const std::string& dir) {
  return fs::is_regular_file(fs::path(dir) / kSingle) ||
         fs::is_regular_file(fs::path(dir) / kIndex);
}

SafetensorsSet::SafetensorsSet(const std::string& dir) {
  const fs::path d(dir);
  std::vector<std::pair<std::string, std::string>> weight_map;
  std::vector<std::string> names;  // file names, in order of first mention
  if (fs::is_regular_file(d / kSingle)) {
    where_ = (d / kSingle).string();
    names.push_back(kSingle);
  } else {
    where_ = (d / kIndex).string();
    ZT_CHECK(fs::is_regular_file(d / kIndex), dir, " has neither ", kSingle, " nor ", kIndex);
    weight_map = read_weight_map(where_);
    std::map<std::string, bool> seen;
    for (const auto& [tensor, file] : weight_map) {
      if (!seen[file]) names.push_back(file);
      seen[file] = true;
    }
  }
  std::map<std::string, size_t> file_index;
  for (const std::string& n : names) {
    file_index[n] = files_.size();
    files_.push_back(std::make_unique<SafetensorsReader>((d / n).string()));
    for (const auto& e : files_.back()->entries()) {
      auto [it, fresh] = owner_.emplace(e.name, files_.size() - 1);
      ZT_CHECK(fresh, files_.back()->path(), ": tensor '", e.name, "' appears twice (also in ",
               files_[it->second]->path(), ")");
    }
  }
  for (const auto& [tensor, file] : weight_map) {
    const SafetensorsReader& f = *files_[file_index.at(file)];
    ZT_CHECK(f.has(tensor), where_, ": weight_map puts tensor '", tensor, "' in ", f.path(),
             ", which does not hold it");
  }
}

const SafetensorsReader* SafetensorsSet::find(const std::string& name) const {
  auto it = owner_.find(name);
  return it == owner_.end() ? nullptr : files_[it->second].get();
}

}  // namespace zt
