#pragma once
// The safetensors files of one model directory, as Hugging Face writes them (save_pretrained):
// DIR/model.safetensors, or the shards that DIR/model.safetensors.index.json's weight_map names
// (model-00001-of-00003.safetensors, ...). Every file's header is read and checked on open
// (SafetensorsReader); no tensor data is read. A tensor is then found by name in whichever file
// holds it.
//
//   zt::SafetensorsSet files("gpt2/");
//   const zt::SafetensorsReader* f = files.find("transformer.wte.weight");  // null: none has it
//   at::Tensor view = f->map("transformer.wte.weight");
//
// Every tensor name lives in one file (a name in two files is an error naming both), and with an
// index every weight_map entry must be in the file it names.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "weights/safetensors_reader.h"

namespace zt {

class SafetensorsSet {
 public:
  // Throws one zt::Error naming the directory, the index or the file for what is missing or
  // malformed.
  explicit SafetensorsSet(const std::string& dir);

  // In the order the directory lists them (one file, or the index's in order of first mention).
  const std::vector<std::unique_ptr<SafetensorsReader>>& files() const { return files_; }
  // The file holding tensor `name`, or nullptr.
  const SafetensorsReader* find(const std::string& name) const;
  // For messages: DIR/model.safetensors, or DIR/model.safetensors.index.json for a sharded set.
  const std::string& where() const { return where_; }

  // Whether DIR holds a model.safetensors or a model.safetensors.index.json.
  static bool present(const std::string& dir);

 private:
  std::string where_;
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::map<std::string, size_t> owner_;  // tensor name -> index into files_
};

}  // namespace zt
