#include "core/config/program_block.h"

#include <yaml-cpp/yaml.h>

#include "core/config/passes.h"
#include "core/config/reader.h"

namespace zt {

struct ProgramBlock::Impl {
  YAML::Node node;  // a mapping, owned (cloned from the file's tree)
};

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
  return impl_ ? config_detail::yaml_to_json(impl_->node) : "{}";
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
