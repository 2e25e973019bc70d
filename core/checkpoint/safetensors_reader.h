#pragma once
// Reader of one safetensors file (the format safetensors_writer.h writes: an 8-byte
// little-endian header length, a JSON header of name -> {dtype, shape, data_offsets}, then the
// raw little-endian bytes). The header is read and checked on open (every range inside the data,
// of the size its dtype and shape say); tensors are read one at a time on request (pread), so a
// caller can stream a file larger than it wants to hold.
//
//   zt::SafetensorsReader r("model.safetensors");
//   for (const auto& e : r.entries()) at::Tensor t = r.read(e.name);

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace zt {

namespace ckpt {
class RecordReader;
}

class SafetensorsReader {
 public:
  struct Entry {
    std::string name;
    at::ScalarType dtype;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  // byte range in the data section
  };
  // Throws one zt::Error naming the file for a malformed header.
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();

  // In data order. The header's __metadata__ (string -> string) is in metadata().
  const std::vector<Entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  const Entry& entry(const std::string& name) const;
  // A fresh CPU tensor holding the entry's value.
  at::Tensor read(const std::string& name) const;
  const std::string& path() const { return path_; }

  // The ScalarType of a safetensors dtype name ("F32", "BF16", ...); throws for others.
  static at::ScalarType dtype_of(const std::string& name);

 private:
  std::string path_;
  std::unique_ptr<ckpt::RecordReader> in_;
  uint64_t data_offset_ = 0;
  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace zt
