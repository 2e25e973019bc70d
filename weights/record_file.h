#pragma once
// Binary record files: little-endian primitives, strings and tensors appended to a file written
// under a temporary name and renamed into place once durable, and read back by position. The
// zerotorch checkpoint format (core/checkpoint/format.h) is written in these records; the
// safetensors reader and writer (weights/safetensors_reader.h, weights/safetensors_writer.h) use
// RecordReader and RecordWriter for their u64 header length and raw bytes only (positioned
// reads, atomic commit).
//
// Encodings: u32/i64/u64 little-endian; str = u64 length + bytes; tensor = u8 dtype
// (c10::ScalarType value), u32 ndim, i64 dims[ndim], u64 nbytes, raw contiguous bytes.

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace zt::io {

// FNV-1a 64 over a file's bytes, read in 1 MiB chunks (memory stays flat).
uint64_t fnv64_file(const std::string& path);

// Appends records to a file opened under a temporary name; commit() fsyncs and renames it.
class RecordWriter {
 public:
  RecordWriter(std::string final_path);
  ~RecordWriter();
  void u8(uint8_t v);
  void u32(uint32_t v);
  void i64(int64_t v);
  void u64(uint64_t v);
  void f64(double v);
  void str(const std::string& s);
  void bytes(const void* p, size_t n);
  void tensor(const at::Tensor& t);  // any CPU-copyable tensor
  // The file's expected size, named by the error when the device fills up (ENOSPC).
  void expect_bytes(uint64_t n) { expected_ = n; }
  // A tensor record whose nbytes of data the caller appends with bytes() (streamed tensors).
  void tensor_header(at::ScalarType dtype, const std::vector<int64_t>& shape);
  // Flushes, fsyncs, and renames the temporary file onto the final path.
  void commit();

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  std::string buf_;
  uint64_t expected_ = 0, written_ = 0;
  void flush();
  void write_all(const char* p, size_t n);
};

// Where a tensor's bytes are in a file, read lazily (consolidation streams one at a time).
struct TensorRef {
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // of the first data byte
  uint64_t nbytes = 0;
  int64_t numel() const;
};

class RecordReader {
 public:
  explicit RecordReader(std::string path);
  ~RecordReader();
  uint8_t u8();
  uint32_t u32();
  int64_t i64();
  uint64_t u64();
  double f64();
  std::string str();
  // The file's 8-byte magic and u32 format version, each checked against what this build reads
  // (versions oldest..newest); returns the version.
  uint32_t magic(const char* expected8, uint32_t oldest, uint32_t newest);
  TensorRef tensor_ref();  // skips the data
  at::Tensor tensor();     // reads it
  // Reads `n` bytes at `offset` into dst (pread; the file position does not move).
  void read_at(uint64_t offset, void* dst, uint64_t n) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  uint64_t pos_ = 0;
  void read(void* dst, uint64_t n);
  // One little-endian scalar at the current position (the targets are little-endian).
  template <typename T>
  T scalar() {
    T v;
    read(&v, sizeof(T));
    return v;
  }
};

}  // namespace zt::io
