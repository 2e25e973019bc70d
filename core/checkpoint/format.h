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
//   tensor device_rng                   (version 2 on: the default generator state of the
//                                        rank's accelerator, uint8; 0 elements on a CPU run)
//   u32 num_client, per item: str key, str value       (this rank's ClientState)
//
// Metadata file:
//   "ZTMETA01", u32 version, u32 world_size, u32 stage,
//   u32 tensor_parallel_size            (version 3 on; 1 before)
//   u8 compute_dtype,
//   i64 global_step, i64 skipped_steps, i64 micro_steps, str optimizer, str config_json,
//   u32 num_scaler, per item: str key, f64 value          (loss scaler state; 0 items if none)
//   u32 num_params, per parameter: str name, u8 trainable, u32 ndim, i64 dims[ndim] (the whole
//     parameter's), i64 split_dim (version 3 on: the dimension split over the tensor group, -1
//     for a parameter every rank of it holds whole), and for a split one (version 4 on)
//     i64 slice[tensor_parallel_size]: each tensor index's extent along split_dim
//   u32 num_shards, per shard: str file name, u64 size in bytes, u64 FNV-1a-64 of its bytes
//
// Tensor parallelism: each tensor index t of tp runs its own ZeRO world of w ranks, and its shards
// are files t·w .. t·w + w - 1 (world_size = tp·w). A split parameter's entries in them are
// offsets in t's slice (extent slice[t] along split_dim, after those of the indices before it;
// equal parts in version 3 files); the others are whole parameters, the same under every t,
// except dealt ones (EngineOptions::dealt_params: DeepSpeed MoE experts under expert
// parallelism), whole too (split_dim -1) but each in the files of the one index that held it.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "weights/record_file.h"

namespace zt::ckpt {

using io::fnv64_file;
using io::RecordReader;
using io::RecordWriter;
using io::TensorRef;

// Version 2 added the shard's device_rng, version 3 the metadata's tensor split, version 4 the
// split's slice extents (uneven splits); this build reads versions 1-3 too (no device_rng; no
// tensor split; equal slices).
constexpr uint32_t kFormatVersion = 4;
constexpr uint32_t kOldestFormatVersion = 1;
constexpr const char* kMetadataFile = "metadata.ztm";
constexpr const char* kLatestFile = "latest";

std::string shard_file_name(int rank);

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
  std::optional<TensorRef> device_rng;  // absent in version 1 files
  std::map<std::string, std::string> client;
};
ShardIndex read_shard_index(const std::string& path);

// Writes a shard file in the layout above, front to back: the constructor writes the header,
// then per buffer (Engine::shard_states() order) buffer(), its master, state_count() and per
// state state_key() and its value, and last finish(). Masters and state values are tensor
// records, written whole with tensor() or as tensor_header() followed by their data a chunk at
// a time with bytes(), so a buffer streams from NVMe or a device and never needs to be gathered
// in host memory. The caller must follow this order: the file carries no markers to check it.
class ShardWriter {
 public:
  // Creates the file under a temporary name, renamed into place by finish() and removed if the
  // writer is destroyed before (a save that threw); expected_bytes is the size the error names
  // if the device fills up.
  ShardWriter(const std::string& path, int rank, int world_size, size_t num_buffers,
              uint64_t expected_bytes);
  // A buffer's coordinates and its parameters' flat-buffer ranges.
  void buffer(int64_t padded_numel, int64_t stepped_begin, int64_t stepped_end,
              const std::vector<ShardBuffer::Entry>& entries);
  void state_count(size_t num_state);
  void state_key(const std::string& key);
  // A tensor record: a master or a state value.
  void tensor(const at::Tensor& t);
  void tensor_header(at::ScalarType dtype, const std::vector<int64_t>& shape);
  void bytes(const void* p, size_t n);
  // Writes what follows the buffers and commits the file (RecordWriter::commit: fsync, then
  // rename onto the final path).
  void finish(const std::vector<std::pair<std::string, at::Tensor>>& frozen, const at::Tensor& rng,
              const at::Tensor& device_rng, const std::map<std::string, std::string>& client);

 private:
  RecordWriter w_;
};

struct ParamInfo {
  std::string name;
  bool trainable = true;
  std::vector<int64_t> shape;        // the whole parameter's
  int split_dim = -1;                // split over the tensor group along this dimension; -1: whole
  std::vector<int64_t> slices = {};  // split: each tensor index's extent along split_dim
};

struct Metadata {
  int world_size = 0, stage = 0;
  int tensor_parallel_size = 1;  // divides world_size
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
