#pragma once
// Streaming writer of one safetensors file (https://github.com/huggingface/safetensors: an
// 8-byte little-endian header length, a JSON header of name -> dtype, shape, byte range, then the
// raw little-endian tensor bytes). The header is built up front from the declared entries, so
// values are written one at a time, in declaration order, and never held together; the file
// appears atomically (temporary name, fsync, rename) on commit().
//
//   zt::SafetensorsWriter w(path, {{"w", at::kBFloat16, {4, 8}}, {"b", at::kFloat, {8}}});
//   w.write("w", w_tensor);
//   w.write("b", b_tensor);
//   w.commit();

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace zt {

namespace io {
class RecordWriter;
}

class SafetensorsWriter {
 public:
  struct Entry {
    std::string name;
    at::ScalarType dtype;
    std::vector<int64_t> shape;
  };
  SafetensorsWriter(const std::string& path, std::vector<Entry> entries);
  ~SafetensorsWriter();
  // The next declared entry: name, dtype and shape must match it (zt::Error otherwise).
  void write(const std::string& name, const at::Tensor& value);
  // Requires every entry written.
  void commit();

  // safetensors' dtype name ("F32", "F16", "BF16", ...); throws for dtypes it has none for.
  static std::string dtype_name(at::ScalarType t);

 private:
  std::string path_;
  std::vector<Entry> entries_;
  size_t next_ = 0;
  std::unique_ptr<io::RecordWriter> out_;
};

}  // namespace zt
