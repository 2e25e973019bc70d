#pragma once
// zt::ProgramBlock: a top-level block of a config that belongs to the training program, not to
// the framework (the GPT example's `model` block: layers, heads, width). The config reader keeps
// every such block unread and hands it over by name (Config::program_block); the program reads
// and validates its keys itself, with the same strictness and messages as the framework's keys.
//
// Which top-level keys are program blocks: a key the schema does not know, holding a block of
// keys (`name: {...}`), that is neither a near miss of a framework key (`zero_optimisation`)
// nor a framework key written at the wrong level (`offload_optimizer` at the top). Those stay
// errors, as do unknown scalars. --set overrides reach program blocks like any other key
// (`--set model.n_layer=2` creates the block when the file has none). to_json writes program
// blocks back, so a checkpoint's stored config reloads with them.
//
//   ProgramBlock m = config.program_block("model");
//   ProgramBlockReader r(m);
//   r.field("n_layer", shape.n_layer);         // absent: the value keeps its default
//   r.at_least("n_layer", shape.n_layer, 1);
//   r.finish();  // unknown keys of the block, with suggestions; throws one zt::Error listing all
//
// Copies share one immutable tree: a ProgramBlock is cheap to copy and never changes.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"

namespace YAML {
class Node;
}

namespace zt {

class ProgramBlock {
 public:
  // An absent block: no keys.
  ProgramBlock() = default;
  explicit ProgramBlock(std::string name) : name_(std::move(name)) {}
  // The block as the config reader found it (core/config/reader.cpp).
  static ProgramBlock from_yaml(std::string name, const YAML::Node& block);

  const std::string& name() const { return name_; }
  bool empty() const { return impl_ == nullptr; }
  bool has(const std::string& key) const;
  std::vector<std::string> keys() const;  // in file order
  // The block as one JSON object ("{}" when absent); keys in file order.
  std::string to_json() const;

  struct Impl;  // the YAML tree, out of this header

 private:
  std::string name_;
  std::shared_ptr<const Impl> impl_;
  friend class ProgramBlockReader;
};

// Reads the keys of one program block into typed values, collecting every problem; finish()
// throws them as one zt::Error ("config `model` block: 2 errors: model.d_model: ...; ...").
class ProgramBlockReader {
 public:
  explicit ProgramBlockReader(const ProgramBlock& block);
  ~ProgramBlockReader();
  ProgramBlockReader(const ProgramBlockReader&) = delete;
  ProgramBlockReader& operator=(const ProgramBlockReader&) = delete;

  // Fills `value` when the block has `key`; otherwise leaves it (its default) alone.
  void field(const char* key, bool& value);
  void field(const char* key, int64_t& value);
  void field(const char* key, double& value);
  void field(const char* key, std::string& value);
  void field(const char* key, std::vector<double>& value);
  void field(const char* key, std::vector<std::string>& value);

  // Range rules, as the framework writes them ("model.n_layer: must be >= 1, got 0").
  void at_least(const char* key, int64_t value, int64_t min);
  // Records "<name>.<key>: <message...>" unless ok.
  template <typename... Args>
  void check(bool ok, const char* key, const Args&... message) {
    if (!ok) error(key, detail::str(message...));
  }
  void error(const char* key, const std::string& message);
  // "<name>.<key>" as messages write it.
  std::string path(const char* key) const;

  const std::vector<std::string>& errors() const { return errors_; }

  // Keys no field() asked for are errors (with the closest known key); throws when any error
  // was recorded.
  void finish();

 private:
  ProgramBlock block_;
  std::vector<std::string> known_;
  std::vector<std::string> errors_;
};

}  // namespace zt
