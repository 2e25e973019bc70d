#include "core/checkpoint/format.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include <ATen/ATen.h>

#include "base/error.h"

namespace zt::ckpt {
namespace {

// The 8 bytes that open each file (the NUL is not written); RecordReader::magic() checks them
// and the format version that follows.
constexpr char kShardMagic[] = "ZTSHARD1";
constexpr char kMetadataMagic[] = "ZTMETA01";
static_assert(sizeof(kShardMagic) == 9 && sizeof(kMetadataMagic) == 9, "magic is 8 bytes");

void write_magic(RecordWriter& w, const char* magic) {
  w.bytes(magic, 8);
  w.u32(kFormatVersion);
}

}  // namespace

std::string shard_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "shard_r%05d.zts", rank);
  return buf;
}

// ---- shard index and metadata ----

ShardIndex read_shard_index(const std::string& path) {
  RecordReader r(path);
  ShardIndex s;
  s.path = path;
  const uint32_t version = r.magic(kShardMagic, kOldestFormatVersion, kFormatVersion);
  s.rank = static_cast<int>(r.u32());
  s.world_size = static_cast<int>(r.u32());
  const uint32_t nb = r.u32();
  for (uint32_t b = 0; b < nb; ++b) {
    ShardBuffer buf;
    buf.padded_numel = r.i64();
    buf.stepped_begin = r.i64();
    buf.stepped_end = r.i64();
    const uint32_t ne = r.u32();
    for (uint32_t e = 0; e < ne; ++e) {
      ShardBuffer::Entry en;
      en.name = r.str();
      en.begin = r.i64();
      en.end = r.i64();
      buf.entries.push_back(std::move(en));
    }
    buf.master = r.tensor_ref();
    ZT_CHECK(
        buf.master.dtype == at::kFloat && buf.master.numel() == buf.stepped_end - buf.stepped_begin,
        "checkpoint file ", path, " is corrupt (master of buffer ", b,
        " does not match its stepped range)");
    const uint32_t ns = r.u32();
    for (uint32_t i = 0; i < ns; ++i) {
      std::string key = r.str();
      buf.state[key] = r.tensor_ref();
    }
    s.buffers.push_back(std::move(buf));
  }
  const uint32_t nf = r.u32();
  for (uint32_t i = 0; i < nf; ++i) {
    std::string name = r.str();
    s.frozen.emplace_back(name, r.tensor_ref());
  }
  s.rng = r.tensor_ref();
  if (version >= 2) s.device_rng = r.tensor_ref();
  const uint32_t nc = r.u32();
  for (uint32_t i = 0; i < nc; ++i) {
    std::string k = r.str();
    s.client[k] = r.str();
  }
  return s;
}

ShardWriter::ShardWriter(const std::string& path, int rank, int world_size, size_t num_buffers,
                         uint64_t expected_bytes)
    : w_(path) {
  w_.expect_bytes(expected_bytes);
  write_magic(w_, kShardMagic);
  w_.u32(static_cast<uint32_t>(rank));
  w_.u32(static_cast<uint32_t>(world_size));
  w_.u32(static_cast<uint32_t>(num_buffers));
}

void ShardWriter::buffer(int64_t padded_numel, int64_t stepped_begin, int64_t stepped_end,
                         const std::vector<ShardBuffer::Entry>& entries) {
  w_.i64(padded_numel);
  w_.i64(stepped_begin);
  w_.i64(stepped_end);
  w_.u32(static_cast<uint32_t>(entries.size()));
  for (const auto& e : entries) {
    w_.str(e.name);
    w_.i64(e.begin);
    w_.i64(e.end);
  }
}

void ShardWriter::state_count(size_t num_state) {
  w_.u32(static_cast<uint32_t>(num_state));
}
void ShardWriter::state_key(const std::string& key) {
  w_.str(key);
}
void ShardWriter::tensor(const at::Tensor& t) {
  w_.tensor(t);
}
void ShardWriter::tensor_header(at::ScalarType dtype, const std::vector<int64_t>& shape) {
  w_.tensor_header(dtype, shape);
}
void ShardWriter::bytes(const void* p, size_t n) {
  w_.bytes(p, n);
}

void ShardWriter::finish(const std::vector<std::pair<std::string, at::Tensor>>& frozen,
                         const at::Tensor& rng, const at::Tensor& device_rng,
                         const std::map<std::string, std::string>& client) {
  w_.u32(static_cast<uint32_t>(frozen.size()));
  for (const auto& [name, t] : frozen) {
    w_.str(name);
    w_.tensor(t);
  }
  w_.tensor(rng);
  w_.tensor(device_rng);
  w_.u32(static_cast<uint32_t>(client.size()));
  for (const auto& [k, v] : client) {
    w_.str(k);
    w_.str(v);
  }
  w_.commit();
}

void write_metadata(const std::string& path, const Metadata& m) {
  RecordWriter w(path);
  write_magic(w, kMetadataMagic);
  w.u32(m.world_size);
  w.u32(m.stage);
  w.u32(m.tensor_parallel_size);
  w.u8(static_cast<uint8_t>(m.compute_dtype));
  w.i64(m.global_step);
  w.i64(m.skipped_steps);
  w.i64(m.micro_steps);
  w.str(m.optimizer);
  w.str(m.config_json);
  w.u32(m.scaler.size());
  for (auto& [k, v] : m.scaler) {
    w.str(k);
    w.f64(v);
  }
  w.u32(m.params.size());
  for (auto& p : m.params) {
    w.str(p.name);
    w.u8(p.trainable ? 1 : 0);
    w.u32(p.shape.size());
    for (int64_t d : p.shape) w.i64(d);
    w.i64(p.split_dim);
    if (p.split_dim >= 0) {
      ZT_CHECK(static_cast<int>(p.slices.size()) == m.tensor_parallel_size,
               "checkpoint: parameter ", p.name, " has ", p.slices.size(), " slice extents for ",
               m.tensor_parallel_size, " tensor indices");
      for (int64_t e : p.slices) w.i64(e);
    }
  }
  w.u32(m.shards.size());
  for (auto& s : m.shards) {
    w.str(s.file);
    w.u64(s.size);
    w.u64(s.fnv64);
  }
  w.commit();
}

Metadata read_metadata(const std::string& path) {
  RecordReader r(path);
  Metadata m;
  const uint32_t version = r.magic(kMetadataMagic, kOldestFormatVersion, kFormatVersion);
  m.world_size = static_cast<int>(r.u32());
  m.stage = static_cast<int>(r.u32());
  if (version >= 3) m.tensor_parallel_size = static_cast<int>(r.u32());
  ZT_CHECK(m.tensor_parallel_size >= 1 && m.world_size % m.tensor_parallel_size == 0,
           "checkpoint file ", path, " is corrupt (tensor parallel size ", m.tensor_parallel_size,
           " for world size ", m.world_size, ")");
  m.compute_dtype = static_cast<at::ScalarType>(r.u8());
  m.global_step = r.i64();
  m.skipped_steps = r.i64();
  m.micro_steps = r.i64();
  m.optimizer = r.str();
  m.config_json = r.str();
  const uint32_t ns = r.u32();
  for (uint32_t i = 0; i < ns; ++i) {
    std::string k = r.str();
    m.scaler[k] = r.f64();
  }
  const uint32_t np = r.u32();
  for (uint32_t i = 0; i < np; ++i) {
    ParamInfo p;
    p.name = r.str();
    p.trainable = r.u8() != 0;
    const uint32_t nd = r.u32();
    ZT_CHECK(nd <= 16, "checkpoint file ", path, " is corrupt (parameter of ", nd, " dims)");
    for (uint32_t d = 0; d < nd; ++d) p.shape.push_back(r.i64());
    if (version >= 3) p.split_dim = static_cast<int>(r.i64());
    ZT_CHECK(p.split_dim >= -1 && p.split_dim < static_cast<int>(nd), "checkpoint file ", path,
             " is corrupt (parameter ", p.name, " split along dim ", p.split_dim, ")");
    if (p.split_dim >= 0) {
      const int64_t whole = p.shape[p.split_dim], tp = m.tensor_parallel_size;
      if (version >= 4) {
        for (int64_t t = 0; t < tp; ++t) p.slices.push_back(r.i64());
      } else {
        ZT_CHECK(whole % tp == 0, "checkpoint file ", path, " is corrupt (parameter ", p.name,
                 " split into ", tp, " parts of ", whole, ")");
        p.slices.assign(static_cast<size_t>(tp), whole / tp);
      }
      int64_t sum = 0;
      for (int64_t e : p.slices) sum += e;
      ZT_CHECK(sum == whole, "checkpoint file ", path, " is corrupt (parameter ", p.name,
               "'s slices add up to ", sum, " of ", whole, ")");
    }
    m.params.push_back(std::move(p));
  }
  const uint32_t nsh = r.u32();
  ZT_CHECK(nsh == static_cast<uint32_t>(m.world_size), "checkpoint file ", path, " is corrupt (",
           nsh, " shards for world size ", m.world_size, ")");
  for (uint32_t i = 0; i < nsh; ++i) {
    Metadata::Shard s;
    s.file = r.str();
    s.size = r.u64();
    s.fnv64 = r.u64();
    m.shards.push_back(std::move(s));
  }
  return m;
}

}  // namespace zt::ckpt
