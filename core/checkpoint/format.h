#pragma once
// The on-disk format of zerotorch checkpoints (docs/DESIGN.md, Checkpoint): our own little-endian
// binary records, no pickle, nothing that can execute code on load.
//
//   <dir>/latest                      text: the newest complete tag, one line
//   <dir>/<tag>/metadata.ztm          written by rank 0 once every shard is durable
//   <dir>/<tag>/shard_r<rank>.zts     one per rank, rank zero-padded to 5 digits
//
// Primitive encodings: u32/i64/u64 little-endian; str = u64 length + bytes; tensor = u8 dtype
// (c10::ScalarType value), u32 ndim, i64 dims[ndim], u64 nbytes, raw contiguous bytes.
//
// Shard file:
//   "ZTSHARD1" (8 bytes), u32 version, u32 rank, u32 world_size
//   u32 num_buffers, per buffer (Engine::shard_states() order):
//     i64 padded_numel, i64 stepped_begin, i64 stepped_end
//     u32 num_entries, per entry: str name, i64 begin, i64 end   (flat-buffer coordinates)
//     tensor master                     (fp32, stepped_end - stepped_begin elements)
//     u32 num_state, per state: str key, tensor value   (ShardOptimizer::state_dict())
//   u32 num_frozen, per frozen parameter (rank 0 only): str name, tensor value
//   tensor rng                          (this rank's default CPU generator state, uint8)
//   u32 num_client, per item: str key, str value       (this rank's ClientState)
//
// Metadata file:
//   "ZTMETA01", u32 version, u32 world_size, u32 stage, u8 compute_dtype,
//   i64 global_step, i64 skipped_steps, i64 micro_steps, str optimizer, str config_json,
//   u32 num_scaler, per item: str key, f64 value          (loss scaler state; 0 items if none)
//   u32 num_params, per parameter: str name, u8 trainable, u32 ndim, i64 dims[ndim]
//   u32 num_shards, per shard: str file name, u64 size in bytes, u64 FNV-1a-64 of its bytes

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace zt::ckpt {

constexpr uint32_t kFormatVersion = 1;
constexpr const char* kMetadataFile = "metadata.ztm";
constexpr const char* kLatestFile = "latest";

std::string shard_file_name(int rank);

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
  // Flushes, fsyncs, and renames the temporary file onto the final path. If `pause_s` > 0 it
  // sleeps between fsync and rename (tests kill a save there).
  void commit(int pause_s = 0);

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
  void magic(const char* expected8);
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
};

struct ShardBuffer {
  int64_t padded_numel = 0, stepped_begin = 0, stepped_end = 0;
  struct Entry {
    std::string name;
    int64_t begin = 0, end = 0;
  };
  std::vector<Entry> entries;
  TensorRef master;
  std::map<std::string, TensorRef> state;
};

// A shard file's headers; tensor data stays on disk until asked for.
struct ShardIndex {
  std::string path;
  int rank = 0, world_size = 0;
  std::vector<ShardBuffer> buffers;
  std::vector<std::pair<std::string, TensorRef>> frozen;
  TensorRef rng;
  std::map<std::string, std::string> client;
};
ShardIndex read_shard_index(const std::string& path);

struct ParamInfo {
  std::string name;
  bool trainable = true;
  std::vector<int64_t> shape;
};

struct Metadata {
  int world_size = 0, stage = 0;
  at::ScalarType compute_dtype = at::kFloat;
  int64_t global_step = 0, skipped_steps = 0, micro_steps = 0;
  std::string optimizer, config_json;
  std::map<std::string, double> scaler;
  std::vector<ParamInfo> params;
  struct Shard {
    std::string file;
    uint64_t size = 0, fnv64 = 0;
  };
  std::vector<Shard> shards;
};
void write_metadata(const std::string& path, const Metadata& m);
Metadata read_metadata(const std::string& path);

}  // namespace zt::ckpt
