#include "core/checkpoint/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <sys/statvfs.h>
#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include "base/error.h"
#include "base/logging.h"
#include "base/remove_tree.h"
#include "base/shape_str.h"
#include "core/checkpoint/format.h"
#include "core/checkpoint/save_parts.h"
#include "core/zero/master_store.h"
#include "parallel/communicator.h"
#include "parallel/tensor_parallel.h"
#include "parallel/topology.h"
#include "weights/safetensors_writer.h"

namespace zt {
namespace fs = std::filesystem;
using ckpt::Metadata;
using ckpt::ShardBuffer;
using ckpt::ShardIndex;

namespace {

// Every rank, every tensor index included (the engine's communicator is its tensor index's ZeRO
// world).
void barrier(Engine& e) {
  e.topology().all->barrier()->wait();
}

// The running engine's tensor split: tp, this rank's index in its tensor group, the dimension
// each split parameter is split along, and this rank's shard file among all of them. Shards are
// numbered within the shard group (with hybrid sharding, mics_shard_size, the copies of one place
// in the group share a number), and each tensor index's shard group numbers its files after those
// of the indices before it (core/checkpoint/format.h).
struct TensorPlace {
  int tp = 1, index = 0;
  int file = 0, files = 1;
  const std::map<std::string, int64_t>* dims = nullptr;
  const std::map<std::string, std::vector<int64_t>>* slices = nullptr;  // Engine::tensor_slices
  int dim_of(const std::string& name) const {
    if (tp == 1 || dims == nullptr) return -1;
    auto it = dims->find(name);
    return it == dims->end() ? -1 : static_cast<int>(it->second);
  }
  // A split parameter's extent on every tensor index.
  const std::vector<int64_t>& slices_of(const std::string& name) const { return slices->at(name); }
};
TensorPlace tensor_place(const Engine& e) {
  TensorPlace p;
  // The split group: tensor slices, or the experts dealt over an expert group (the same layout on
  // disk: each index's ZeRO world writes its own files).
  p.tp = e.topology().split_size();
  p.index = e.topology().split_index();
  p.file = p.index * e.shard_communicator().size() + e.shard_communicator().rank();
  p.files = p.tp * e.shard_communicator().size();
  p.dims = &e.options().tensor_split_params;
  p.slices = &e.tensor_slices();
  return p;
}

void write_text_atomic(const fs::path& path, const std::string& text) {
  ckpt::RecordWriter w(path.string());
  w.bytes(text.data(), text.size());
  w.commit();
}

// Whole shapes: a split parameter's slices joined along its split dimension; a dealt parameter
// under every rank's name (each in the files of the tensor index that holds it).
std::vector<ckpt::ParamInfo> model_params(const Engine& engine) {
  const TensorPlace place = tensor_place(engine);
  std::vector<ckpt::ParamInfo> out;
  for (const auto& p : engine.model()->named_parameters()) {
    ckpt::ParamInfo info{p.key(), p.value().requires_grad(), p.value().sizes().vec()};
    info.split_dim = place.dim_of(p.key());
    if (info.split_dim >= 0) {
      info.slices = place.slices_of(p.key());
      info.shape[info.split_dim] =
          std::accumulate(info.slices.begin(), info.slices.end(), int64_t{0});
    }
    auto dealt = engine.dealt_names().find(p.key());
    if (dealt == engine.dealt_names().end()) {
      out.push_back(std::move(info));
      continue;
    }
    for (const std::string& name : dealt->second) {
      out.push_back(info);
      out.back().name = name;
    }
  }
  return out;
}

// Checkpoints keep frozen parameters whole (rank 0 saves them, every rank loads them as they are).
void check_frozen_whole(const Engine& engine) {
  const TensorPlace place = tensor_place(engine);
  for (const auto& p : engine.model()->named_parameters()) {
    ZT_CHECK(p.value().requires_grad() ||
                 (place.dim_of(p.key()) < 0 && !engine.dealt_names().count(p.key())),
             "checkpoint: frozen parameter ", p.key(),
             " is split over the tensor group, and checkpoints hold frozen parameters "
             "whole; train it or leave it out of the split");
  }
}

// ---- opening a checkpoint: everything validated before anything is used ----

struct OpenCheckpoint {
  fs::path tag_dir;
  std::string meta_path;
  Metadata meta;
  std::vector<ShardIndex> shards;  // index r = rank r's file
  std::vector<std::unique_ptr<ckpt::RecordReader>> readers;
};

OpenCheckpoint open_checkpoint(const std::string& dir, const std::string& tag_in) {
  ZT_CHECK(fs::is_directory(dir), "checkpoint dir ", dir, " does not exist");
  const std::string tag = tag_in.empty() ? latest_checkpoint_tag(dir) : tag_in;
  OpenCheckpoint c;
  c.tag_dir = fs::path(dir) / tag;
  ZT_CHECK(fs::is_directory(c.tag_dir), "checkpoint tag ", tag, " does not exist: no directory ",
           c.tag_dir.string());
  c.meta_path = (c.tag_dir / ckpt::kMetadataFile).string();
  ZT_CHECK(fs::exists(c.meta_path), "checkpoint ", c.tag_dir.string(),
           " is incomplete: ", c.meta_path, " is missing (a save that did not finish)");
  c.meta = ckpt::read_metadata(c.meta_path);
  for (int r = 0; r < c.meta.world_size; ++r) {
    const auto& s = c.meta.shards[r];
    const std::string path = (c.tag_dir / s.file).string();
    ZT_CHECK(fs::exists(path), "checkpoint shard ", path, " is missing (", c.meta_path, " lists ",
             c.meta.world_size, " shards)");
    const uint64_t size = fs::file_size(path);
    ZT_CHECK(size == s.size, "checkpoint shard ", path, " is truncated or grown: ", size,
             " bytes, metadata says ", s.size);
    ZT_CHECK(ckpt::fnv64_file(path) == s.fnv64, "checkpoint shard ", path,
             " is corrupt: checksum mismatch (FNV-1a-64 differs from ", c.meta_path, ")");
    c.shards.push_back(ckpt::read_shard_index(path));
    ZT_CHECK(c.shards.back().rank == r && c.shards.back().world_size == c.meta.world_size,
             "checkpoint shard ", path, " belongs to rank ", c.shards.back().rank, " of ",
             c.shards.back().world_size, ", expected rank ", r, " of ", c.meta.world_size);
    c.readers.push_back(std::make_unique<ckpt::RecordReader>(path));
  }
  return c;
}

void check_same_model(const OpenCheckpoint& c, const Engine& engine) {
  std::map<std::string, const ckpt::ParamInfo*> saved;
  for (const auto& p : c.meta.params) saved[p.name] = &p;
  const auto mine = model_params(engine);
  for (const auto& p : mine) {
    auto it = saved.find(p.name);
    ZT_CHECK(it != saved.end(), "checkpoint ", c.meta_path,
             " is from another model: it has no parameter ", p.name);
    ZT_CHECK(it->second->shape == p.shape, "checkpoint ", c.meta_path,
             " is from another model: parameter ", p.name, " has shape ",
             shape_str(it->second->shape), " there, ", shape_str(p.shape), " in the model");
    ZT_CHECK(it->second->trainable == p.trainable, "checkpoint ", c.meta_path, ": parameter ",
             p.name, " is ", it->second->trainable ? "trainable" : "frozen",
             " there but not in the model");
  }
  std::set<std::string> model_names;
  for (const auto& p : mine) model_names.insert(p.name);
  for (const auto& p : c.meta.params) {
    ZT_CHECK(model_names.count(p.name), "checkpoint ", c.meta_path, " has parameter ", p.name,
             ", which the model does not have");
  }
  ZT_CHECK(mine.size() == c.meta.params.size(), "checkpoint ", c.meta_path,
           " is from another model: it has ", c.meta.params.size(), " parameters, the model ",
           mine.size());
}

// One saved piece of a parameter: elements [pbegin, pend) of the parameter sit at element
// `at` of the master (and of each state tensor laid out like master) of `buf` in shard `shard`.
struct Piece {
  int shard;
  const ShardBuffer* buf;
  int64_t pbegin, pend, at;
};
// Keyed by (parameter name, tensor index): the pieces saved by that tensor index's shards, in
// the coordinates of its slice (the whole parameter when it is not split).
using PieceIndex = std::map<std::pair<std::string, int>, std::vector<Piece>>;

PieceIndex index_pieces(const OpenCheckpoint& c) {
  PieceIndex idx;
  const int per_index = c.meta.world_size / c.meta.tensor_parallel_size;
  for (size_t s = 0; s < c.shards.size(); ++s) {
    // At stage 0 every rank of a tensor index steps (and saved) the whole buffer: one copy is
    // enough.
    if (c.meta.stage == 0 && s % per_index != 0) continue;
    const int t = static_cast<int>(s) / per_index;
    for (const auto& b : c.shards[s].buffers) {
      for (const auto& e : b.entries) {
        const int64_t lo = std::max(e.begin, b.stepped_begin), hi = std::min(e.end, b.stepped_end);
        if (lo >= hi) continue;
        idx[{e.name, t}].push_back(
            {static_cast<int>(s), &b, lo - e.begin, hi - e.begin, lo - b.stepped_begin});
      }
    }
  }
  return idx;
}

// The saved tensor `what` of a piece's buffer ("master" or a state key laid out like master).
const ckpt::TensorRef& piece_ref(const OpenCheckpoint& c, const Piece& p, const std::string& what) {
  if (what == "master") return p.buf->master;
  auto it = p.buf->state.find(what);
  ZT_CHECK(it != p.buf->state.end(), "checkpoint shard ", c.shards[p.shard].path,
           " has no optimizer state ", what);
  ZT_CHECK(it->second.numel() == p.buf->master.numel(), "checkpoint shard ", c.shards[p.shard].path,
           ": optimizer state ", what, " is not laid out like master, so it cannot be resharded");
  return it->second;
}

// Fills dst[dst_at, dst_at + (pend - pbegin)) with elements [pbegin, pend) of parameter `name` as
// tensor index t saved it (its slice, or the whole parameter).
void fill_range(const OpenCheckpoint& c, const PieceIndex& idx, const std::string& name, int t,
                const std::string& what, int64_t pbegin, int64_t pend, at::Tensor& dst,
                int64_t dst_at) {
  auto it = idx.find({name, t});
  ZT_CHECK(it != idx.end(), "checkpoint ", c.meta_path, " holds no values of parameter ", name);
  int64_t covered = 0;
  char* base = static_cast<char*>(dst.data_ptr());
  const size_t es = dst.element_size();
  for (const auto& p : it->second) {
    const int64_t lo = std::max(pbegin, p.pbegin), hi = std::min(pend, p.pend);
    if (lo >= hi) continue;
    const auto& ref = piece_ref(c, p, what);
    ZT_CHECK(ref.dtype == dst.scalar_type(), "checkpoint shard ", c.shards[p.shard].path, ": ",
             what, " has dtype ", ref.dtype, ", expected ", dst.scalar_type());
    c.readers[p.shard]->read_at(ref.offset + (p.at + lo - p.pbegin) * es,
                                base + (dst_at + lo - pbegin) * es, (hi - lo) * es);
    covered += hi - lo;
  }
  ZT_CHECK(covered == pend - pbegin, "checkpoint ", c.meta_path, " covers ", covered, " of ",
           pend - pbegin, " requested elements of parameter ", name);
}

// Parameter values as an engine holds them (its tensor slice, or the whole parameter) from a
// checkpoint saved at any tensor split: read straight from the pieces when the split is the same,
// else joined from every tensor index's slices and cut again (one parameter at a time, kept until
// another is asked for, so chunked reads of one parameter join it once).
class ParamValues {
 public:
  ParamValues(const OpenCheckpoint& c, TensorPlace place)
      : c_(c), idx_(index_pieces(c)), place_(place) {
    for (const auto& p : c.meta.params) info_[p.name] = &p;
  }
  void fill(const std::string& name, const std::string& what, int64_t pbegin, int64_t pend,
            at::Tensor& dst, int64_t dst_at) {
    auto it = info_.find(name);
    ZT_CHECK(it != info_.end(), "checkpoint ", c_.meta_path, " has no parameter ", name);
    const ckpt::ParamInfo& info = *it->second;
    const int saved_tp = c_.meta.tensor_parallel_size;
    const int saved = saved_tp > 1 ? info.split_dim : -1;
    const int mine = place_.dim_of(name);
    if (saved < 0 && mine < 0)
      return fill_range(c_, idx_, name, holder(name), what, pbegin, pend, dst, dst_at);
    if (saved == mine && saved_tp == place_.tp &&
        (mine < 0 || info.slices == place_.slices_of(name)))
      return fill_range(c_, idx_, name, place_.index, what, pbegin, pend, dst, dst_at);
    if (name != held_name_ || what != held_what_) {
      const auto opts = at::TensorOptions().dtype(dst.scalar_type());
      at::Tensor whole;
      if (saved < 0) {
        whole = at::empty(info.shape, opts);
        fill_range(c_, idx_, name, holder(name), what, 0, whole.numel(), whole, 0);
      } else {
        std::vector<int64_t> shape = info.shape;
        std::vector<at::Tensor> parts;
        for (int t = 0; t < saved_tp; ++t) {
          shape[saved] = info.slices[static_cast<size_t>(t)];
          at::Tensor part = at::empty(shape, opts);
          fill_range(c_, idx_, name, t, what, 0, part.numel(), part, 0);
          parts.push_back(std::move(part));
        }
        whole = at::cat(parts, saved);
      }
      if (mine >= 0) {
        const std::vector<int64_t>& slices = place_.slices_of(name);
        ZT_CHECK(std::accumulate(slices.begin(), slices.end(), int64_t{0}) == whole.size(mine),
                 "checkpoint ", c_.meta_path, ": parameter ", name, " has ", whole.size(mine),
                 " features along dimension ", mine, ", the model's slices add up to another");
        whole = whole.narrow(mine, dist::split_offset(slices, place_.index),
                             slices[static_cast<size_t>(place_.index)]);
      }
      held_ = whole.contiguous().view(-1);
      held_name_ = name;
      held_what_ = what;
    }
    ZT_CHECK(pend <= held_.numel(), "checkpoint ", c_.meta_path, ": parameter ", name, " has ",
             held_.numel(), " elements in this rank's slice, ", pend, " were asked for");
    dst.view(-1).narrow(0, dst_at, pend - pbegin).copy_(held_.narrow(0, pbegin, pend - pbegin));
  }

 private:
  // The first tensor index whose files hold values of `name`: 0 for a parameter every index
  // holds, the one that held it for a dealt parameter (EngineOptions::dealt_params).
  int holder(const std::string& name) const {
    if (idx_.count({name, 0})) return 0;
    for (int t = 1; t < c_.meta.tensor_parallel_size; ++t) {
      if (idx_.count({name, t})) return t;
    }
    return 0;  // fill_range names the parameter it finds no values of
  }

  const OpenCheckpoint& c_;
  PieceIndex idx_;
  TensorPlace place_;
  std::map<std::string, const ckpt::ParamInfo*> info_;
  std::string held_name_, held_what_;
  at::Tensor held_;
};

at::Tensor read_ref(const OpenCheckpoint& c, int shard, const ckpt::TensorRef& ref) {
  at::Tensor t = at::empty(ref.shape, at::TensorOptions().dtype(ref.dtype));
  c.readers[shard]->read_at(ref.offset, t.data_ptr(), ref.nbytes);
  return t;
}

bool same_layouts(const std::vector<Engine::ShardState>& states, const ShardIndex& s) {
  if (states.size() != s.buffers.size()) return false;
  for (size_t b = 0; b < states.size(); ++b) {
    const auto& st = states[b];
    const auto& sb = s.buffers[b];
    if (st.layout->padded_numel() != sb.padded_numel || st.stepped.begin != sb.stepped_begin ||
        st.stepped.end != sb.stepped_end || st.layout->entries().size() != sb.entries.size())
      return false;
    for (size_t e = 0; e < sb.entries.size(); ++e) {
      const auto& en = st.layout->entries()[e];
      if (en.name != sb.entries[e].name || en.range.begin != sb.entries[e].begin ||
          en.range.end != sb.entries[e].end)
        return false;
    }
  }
  return true;
}

// The first saved buffer and its shard: every saved buffer has the same optimizer, so it names
// the state keys (nullptr when no rank saved a buffer).
std::pair<const ShardBuffer*, int> prototype(const OpenCheckpoint& c) {
  for (size_t s = 0; s < c.shards.size(); ++s) {
    if (!c.shards[s].buffers.empty()) return {&c.shards[s].buffers.front(), static_cast<int>(s)};
  }
  return {nullptr, 0};
}

// New values of one buffer that are read before the engine is touched: everything, when the
// master store keeps the buffer in memory; only what the optimizer keeps in memory ("step"), when
// the store streams the master and state from files (they are streamed in at the commit, one
// chunk at a time, never a whole buffer in host memory).
struct Prepared {
  at::Tensor master;  // undefined when streamed
  std::map<std::string, at::Tensor> state;
};

std::vector<Prepared> prepare_exact(const OpenCheckpoint& c, int rank,
                                    const std::set<std::string>& streamed) {
  std::vector<Prepared> out;
  for (const auto& b : c.shards[rank].buffers) {
    Prepared p;
    if (!streamed.count("master")) p.master = read_ref(c, rank, b.master);
    for (const auto& [k, ref] : b.state) {
      if (!streamed.count(k)) p.state[k] = read_ref(c, rank, ref);
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<Prepared> prepare_reshard(const OpenCheckpoint& c, ParamValues& values,
                                      const std::vector<Engine::ShardState>& states,
                                      const std::set<std::string>& streamed) {
  const auto [proto, proto_shard] = prototype(c);
  std::vector<Prepared> out;
  for (const auto& st : states) {
    Prepared p;
    const int64_t n = st.stepped.size();
    // Padding elements stay zero, as a fresh engine has them.
    std::vector<std::string> laid_out;
    if (!streamed.count("master")) {
      p.master = at::zeros({n}, at::kFloat);
      laid_out.push_back("master");
    }
    if (proto) {
      for (const auto& [k, ref] : proto->state) {
        if (ref.shape.empty()) {  // a scalar such as "step": the same on every rank
          p.state[k] = read_ref(c, proto_shard, ref);
        } else if (!streamed.count(k)) {
          p.state[k] = at::zeros({n}, at::TensorOptions().dtype(ref.dtype));
          laid_out.push_back(k);
        }
      }
    }
    for (const auto& e : st.layout->entries()) {
      const int64_t lo = std::max(e.range.begin, st.stepped.begin);
      const int64_t hi = std::min(e.range.end, st.stepped.end);
      if (lo >= hi) continue;
      const int64_t pb = lo - e.range.begin, pe = hi - e.range.begin;
      const int64_t dst_at = lo - st.stepped.begin;
      for (const auto& k : laid_out) {
        values.fill(e.name, k, pb, pe, k == "master" ? p.master : p.state[k], dst_at);
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

// ---- the master store's side of a shard ----
// A buffer's master and the state laid out like it stream between the master store
// (core/zero/master_store.h) and the shard file one chunk at a time, whatever the placement (in
// memory a chunk is the whole buffer; on NVMe the swap buffers, never a whole buffer in host
// memory). The records do not depend on the placement, with the state keys in sorted order, so a
// checkpoint saved with NVMe offload loads with CPU offload or none, and the other way round.

void write_buffer_state(ckpt::ShardWriter& w, zero::MasterStore& store, size_t b,
                        const Engine::ShardState& s) {
  const int64_t n = s.stepped.size();
  auto stream = [&](int state) {  // -1: the master
    w.tensor_header(at::kFloat, {n});
    store.for_each_chunk(
        {b},
        [&](zero::MasterChunk& c) {
          const at::Tensor& t = state < 0 ? c.master : c.states[static_cast<size_t>(state)];
          const at::Tensor host = t.to(at::kCPU, at::kFloat).contiguous();
          w.bytes(host.data_ptr(), static_cast<size_t>(c.numel) * sizeof(float));
        },
        /*read=*/true, /*write_back=*/false);
  };
  stream(-1);
  std::map<std::string, int> keys;  // state name -> index in the store's chunks, -1: in memory
  const auto in_memory = s.optimizer->state_dict();
  for (const auto& kv : in_memory) keys[kv.first] = -1;
  for (size_t i = 0; i < store.state_names().size(); ++i) {
    keys[store.state_names()[i]] = static_cast<int>(i);
  }
  w.state_count(keys.size());
  for (const auto& [k, i] : keys) {
    w.state_key(k);
    if (i < 0) {
      w.tensor(in_memory.at(k));
    } else {
      stream(i);
    }
  }
}

// Fills buffer b of the master store at the commit of a load: what `prepared` holds is copied;
// what it does not (the store streams it) is read from checkpoint `c` chunk by chunk (this rank's
// own shard when exact, else resharded from every shard's pieces). State missing from the
// checkpoint (saved before the first step) is zero, as a fresh Adam has it.
void fill_store_buffer(const OpenCheckpoint& c, ParamValues& values, int rank, bool exact, size_t b,
                       const Engine::ShardState& st, const Prepared& prepared,
                       zero::MasterStore& store) {
  const ShardBuffer* own = exact ? &c.shards[rank].buffers[b] : prototype(c).first;
  std::function<void(const std::string&, int64_t, int64_t, at::Tensor&)> fill;
  fill = [&](const std::string& what, int64_t begin, int64_t n, at::Tensor& dst) {
    if (dst.scalar_type() != at::kFloat) {
      // A bf16 master or state: the fp32 record, rounded to nearest even as it is stored.
      at::Tensor wide = at::empty({n}, at::TensorOptions().dtype(at::kFloat));
      fill(what, begin, n, wide);
      dst.copy_(wide);
      return;
    }
    const at::Tensor* ready =
        what == "master" ? (prepared.master.defined() ? &prepared.master : nullptr)
                         : (prepared.state.count(what) ? &prepared.state.at(what) : nullptr);
    if (ready != nullptr) {
      dst.copy_(ready->narrow(0, begin, n));
      return;
    }
    if (what != "master" && (own == nullptr || own->state.count(what) == 0)) {
      dst.zero_();
      return;
    }
    if (exact) {
      const ckpt::TensorRef& ref = what == "master" ? own->master : own->state.at(what);
      ZT_CHECK(ref.dtype == at::kFloat && ref.numel() == st.stepped.size(), "checkpoint shard ",
               c.shards[rank].path, ": ", what, " of buffer ", b, " is not ", st.stepped.size(),
               " fp32 elements");
      c.readers[rank]->read_at(ref.offset + static_cast<uint64_t>(begin) * sizeof(float),
                               dst.data_ptr(), static_cast<uint64_t>(n) * sizeof(float));
      return;
    }
    dst.zero_();  // padding stays zero, as a fresh engine has it
    const int64_t lo_chunk = st.stepped.begin + begin, hi_chunk = lo_chunk + n;
    for (const auto& e : st.layout->entries()) {
      const int64_t lo = std::max(e.range.begin, lo_chunk), hi = std::min(e.range.end, hi_chunk);
      if (lo >= hi) continue;
      values.fill(e.name, what, lo - e.range.begin, hi - e.range.begin, dst, lo - lo_chunk);
    }
  };
  const auto& names = store.state_names();
  store.for_each_chunk(
      {b},
      [&](zero::MasterChunk& ch) {
        fill("master", ch.begin, ch.numel, ch.master);
        for (size_t i = 0; i < names.size(); ++i) fill(names[i], ch.begin, ch.numel, ch.states[i]);
      },
      /*read=*/false, /*write_back=*/true);
}

// Tag directories with a metadata file, oldest metadata first.
std::vector<std::pair<fs::file_time_type, fs::path>> complete_tags_by_age(const fs::path& dir) {
  std::vector<std::pair<fs::file_time_type, fs::path>> complete;
  if (!fs::is_directory(dir)) return complete;
  for (const auto& d : fs::directory_iterator(dir)) {
    const fs::path meta = d.path() / ckpt::kMetadataFile;
    if (d.is_directory() && fs::exists(meta))
      complete.emplace_back(fs::last_write_time(meta), d.path());
  }
  std::sort(complete.begin(), complete.end());
  return complete;
}

void retain_last(const fs::path& dir, int64_t keep_last) {
  if (keep_last <= 0) return;
  const auto complete = complete_tags_by_age(dir);
  const int64_t drop = static_cast<int64_t>(complete.size()) - keep_last;
  for (int64_t i = 0; i < drop; ++i) {
    // Metadata first: a crash mid-removal leaves an incomplete tag, never a half-valid one.
    fs::remove(complete[i].second / ckpt::kMetadataFile);
    const std::string error = remove_tree(complete[i].second.string());
    if (error.empty()) {
      ZT_LOG_INFO("checkpoint: removed ", complete[i].second.string(), " (keep_last ", keep_last,
                  ")");
    } else {
      ZT_LOG_WARN("checkpoint: keep_last ", keep_last, ": ", error);
    }
  }
}

}  // namespace

std::string latest_checkpoint_tag(const std::string& dir) {
  const fs::path p = fs::path(dir) / ckpt::kLatestFile;
  std::ifstream in(p);
  ZT_CHECK(in.good(), "checkpoint dir ", dir, " has no ", ckpt::kLatestFile,
           " file: pass a tag or save first");
  std::string tag;
  std::getline(in, tag);
  ZT_CHECK(!tag.empty(), "checkpoint file ", p.string(), " is empty");
  return tag;
}

std::vector<std::string> complete_checkpoint_tags(const std::string& dir) {
  std::vector<std::string> tags;
  const auto complete = complete_tags_by_age(dir);
  for (auto it = complete.rbegin(); it != complete.rend(); ++it)
    tags.push_back(it->second.filename().string());
  return tags;
}

void save_checkpoint(Engine& engine, const std::string& dir, const std::string& tag,
                     const ClientState& client, const CheckpointOptions& options) {
  using namespace checkpoint_detail;
  const SaveTarget target = begin_save(engine, dir, tag);
  auto states = engine.shard_states();
  if (target.writer) {
    const fs::path shard = target.shard_path();
    zero::MasterStore& store = engine.master_store();
    const uint64_t need = shard_bytes_at_least(states, store.state_names().size());
    check_free_space(target.tag_dir, shard, need);
    ckpt::ShardWriter w(shard.string(), target.shard_rank, target.shard_world, states.size(), need);
    for (size_t b = 0; b < states.size(); ++b) {
      const auto& s = states[b];
      std::vector<ShardBuffer::Entry> entries;
      for (const auto& e : s.layout->entries())
        entries.push_back({e.name, e.range.begin, e.range.end});
      w.buffer(s.layout->padded_numel(), s.stepped.begin, s.stepped.end, entries);
      write_buffer_state(w, store, b, s);
    }
    const auto frozen = frozen_parameters(engine, target.lead);
    w.finish(frozen, cpu_rng_state(), device_rng_state(engine.communicator().device()), client);
    fsync_dir(target.tag_dir);
  }
  barrier(engine);  // every shard is durable under its final name

  if (target.lead) {
    Metadata m = metadata_now(engine, options);
    for (int r = 0; r < target.shard_world; ++r) {
      const fs::path p = target.tag_dir / ckpt::shard_file_name(r);
      m.shards.push_back({ckpt::shard_file_name(r), fs::file_size(p), ckpt::fnv64_file(p)});
    }
    commit_save(target, std::move(m), options.keep_last);
  }
  barrier(engine);
}

namespace checkpoint_detail {

fs::path SaveTarget::shard_path() const {
  return tag_dir / ckpt::shard_file_name(shard_rank);
}

SaveTarget begin_save(Engine& engine, const std::string& dir, const std::string& tag) {
  ZT_CHECK(!tag.empty() && tag.find('/') == std::string::npos && tag != "." && tag != "..",
           "checkpoint tag '", tag, "' must be a non-empty name without '/'");
  // Shards are numbered within the shard group; with hybrid sharding (mics_shard_size) only the
  // first group writes (the others hold the same state), so the checkpoint looks like one saved
  // by shard-size ranks and loads at any world size and group size.
  check_frozen_whole(engine);
  const TensorPlace place = tensor_place(engine);
  SaveTarget t;
  t.dir = dir;
  t.tag = tag;
  t.tag_dir = fs::path(dir) / tag;
  t.shard_rank = place.file;
  t.shard_world = place.files;
  t.lead = engine.topology().all->rank() == 0;
  t.writer = engine.replica_index() == 0;
  if (t.lead) {
    fs::create_directories(t.tag_dir);
    fs::remove(t.tag_dir / ckpt::kMetadataFile);
  }
  barrier(engine);
  return t;
}

Metadata metadata_now(Engine& engine, const CheckpointOptions& options) {
  Metadata m;
  const TensorPlace place = tensor_place(engine);
  m.tensor_parallel_size = place.tp;
  m.world_size = place.files;
  m.stage = engine.options().stage;
  m.compute_dtype = engine.options().compute_dtype;
  m.global_step = engine.global_step();
  m.skipped_steps = engine.skipped_steps();
  m.micro_steps = engine.micro_steps();
  const auto states = engine.shard_states();
  m.optimizer = states.empty() ? "" : states.front().optimizer->name();
  m.config_json = options.config_json;
  if (engine.loss_scaler()) m.scaler = engine.loss_scaler()->state();
  m.params = model_params(engine);
  return m;
}

std::vector<std::pair<std::string, at::Tensor>> frozen_parameters(Engine& engine, bool keep) {
  std::vector<std::pair<std::string, at::Tensor>> frozen;
  engine.for_each_frozen_value([&](const std::string& name, const at::Tensor& value) {
    if (keep && value.has_storage() && (value.numel() == 0 || value.data_ptr() != nullptr))
      frozen.emplace_back(name, value.detach().to(at::kCPU, /*non_blocking=*/false,
                                                  /*copy=*/true));
  });
  return frozen;
}

at::Tensor cpu_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

at::Tensor device_rng_state(c10::Device device) {
  if (device.is_cpu()) return at::empty({0}, at::kByte);
  at::Generator gen = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void restore_device_rng_state(c10::Device device, const at::Tensor& state) {
  if (device.is_cpu() || state.numel() == 0) return;
  at::Generator gen = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

void commit_save(const SaveTarget& target, Metadata meta, int64_t keep_last) {
  ckpt::write_metadata((target.tag_dir / ckpt::kMetadataFile).string(), meta);
  fsync_dir(target.tag_dir);
  write_text_atomic(target.dir / ckpt::kLatestFile, target.tag + "\n");
  fsync_dir(target.dir);
  retain_last(target.dir, keep_last);
  ZT_LOG_INFO("checkpoint: saved ", target.tag_dir.string(), " (", meta.shards.size(),
              " shards, step ", meta.global_step, ")");
}

void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // best effort: the file data itself was already fsynced
  ::fsync(fd);
  ::close(fd);
}

// The bytes of tensor data this rank's shard holds at least (the engine's stepped ranges: masters
// and optimizer state; names, frozen parameters and the RNG add a little).
// store_states: the state tensors laid out like master that the master store holds (in its
// chunks, not in the optimizer's state_dict).
uint64_t shard_bytes_at_least(const std::vector<Engine::ShardState>& states, size_t store_states) {
  uint64_t n = 0;
  for (const auto& s : states) {
    n += static_cast<uint64_t>(s.stepped.size()) * sizeof(float) * (1 + store_states);
    for (const auto& [k, t] : s.optimizer->state_dict())
      n += static_cast<uint64_t>(t.numel()) * t.element_size();
  }
  return n;
}

// Before a byte is written: a device that cannot hold the shard stops the save with one line
// naming the file and the bytes (the previous checkpoint stays the latest). Several ranks writing
// to one device can still fill it together; RecordWriter then names the file and bytes as well.
void check_free_space(const fs::path& dir, const fs::path& file, uint64_t need) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return;  // unknown: the writes will tell
  const uint64_t free_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  ZT_CHECK(free_bytes >= need, "checkpoint file ", file.string(), " needs at least ", need,
           " bytes, but ", dir.string(), " has ", free_bytes, " free");
}

}  // namespace checkpoint_detail

ClientState load_checkpoint(Engine& engine, const std::string& dir, const std::string& tag) {
  // Every copy of a hybrid-sharded state reads the shards of its place in the group; under tensor
  // parallelism, of its tensor index (core/checkpoint/format.h).
  check_frozen_whole(engine);
  const TensorPlace place = tensor_place(engine);
  const int rank = place.file, world = place.files;
  // Validation: no collective and no change to the engine until everything is read, so a bad
  // checkpoint throws the same error on every rank.
  OpenCheckpoint c = open_checkpoint(dir, tag);
  check_same_model(c, engine);
  auto states = engine.shard_states();
  if (!states.empty() && !c.meta.optimizer.empty()) {
    ZT_CHECK(states.front().optimizer->name() == c.meta.optimizer, "checkpoint ", c.meta_path,
             " was saved with optimizer ", c.meta.optimizer, ", the engine uses ",
             states.front().optimizer->name());
  }
  const bool exact = c.meta.world_size == world && c.meta.tensor_parallel_size == place.tp &&
                     same_layouts(states, c.shards[rank]);
  // A store that holds the state in files streams it (and the master) in at the commit instead.
  zero::MasterStore& store = engine.master_store();
  std::set<std::string> streamed;
  if (store.holds_state()) {
    streamed.insert("master");
    streamed.insert(store.state_names().begin(), store.state_names().end());
  }
  ParamValues values(c, place);
  std::vector<Prepared> prepared =
      exact ? prepare_exact(c, rank, streamed) : prepare_reshard(c, values, states, streamed);
  const ShardIndex& own = c.shards[rank < c.meta.world_size ? rank : 0];
  std::map<std::string, at::Tensor> frozen;
  for (const auto& [name, ref] : c.shards[0].frozen) frozen.emplace(name, read_ref(c, 0, ref));
  at::Tensor rng = read_ref(c, rank < c.meta.world_size ? rank : 0, own.rng);
  at::Tensor device_rng = own.device_rng
                              ? read_ref(c, rank < c.meta.world_size ? rank : 0, *own.device_rng)
                              : at::Tensor();

  // Commit.
  {
    c10::NoGradGuard no_grad;
    for (size_t b = 0; b < states.size(); ++b) {
      fill_store_buffer(c, values, rank, exact, b, states[b], prepared[b], store);
      // The state was read into host memory; it lives where the masters live (the GPU, unless
      // offloaded), which every optimizer's step expects. "step" is a host counter.
      for (auto& [name, t] : prepared[b].state) {
        if (name != "step" && t.defined()) t = t.to(store.device());
      }
      states[b].optimizer->load_state_dict(prepared[b].state);
    }
  }
  engine.load_frozen(frozen);
  engine.sync_params_from_masters();
  engine.restore_counters(c.meta.global_step, c.meta.skipped_steps, c.meta.micro_steps);
  if (engine.mutable_loss_scaler() && !c.meta.scaler.empty())
    engine.mutable_loss_scaler()->load_state(c.meta.scaler);
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng);
  }
  if (device_rng.defined()) restore_device_rng_state(engine.communicator().device(), device_rng);
  ZT_LOG_INFO("checkpoint: loaded ", c.tag_dir.string(),
              exact ? " (exact resume)" : " (resharded from ",
              exact ? ""
                    : std::to_string(c.meta.world_size) + " ranks, stage " +
                          std::to_string(c.meta.stage) + ")");
  return own.client;
}

void for_each_consolidated(const std::string& dir, const std::string& tag, const std::string& what,
                           const std::function<void(const std::string&, const at::Tensor&)>& fn) {
  OpenCheckpoint c = open_checkpoint(dir, tag);
  ParamValues values(c, TensorPlace{});  // whole parameters, joined from tensor slices
  for (const auto& p : c.meta.params) {
    if (!p.trainable) continue;
    at::Tensor t = at::empty(p.shape, at::kFloat);
    if (t.numel() > 0) values.fill(p.name, what, 0, t.numel(), t, 0);
    fn(p.name, t);
  }
  if (what == "master") {
    for (const auto& [name, ref] : c.shards[0].frozen) fn(name, read_ref(c, 0, ref));
  }
}

void consolidate_to_safetensors(const std::string& dir, const std::string& tag,
                                const std::string& out_path, const StoredLayout& layout) {
  auto pieces_of = [&](const std::string& name, const std::vector<int64_t>& shape) {
    std::vector<StoredPiece> pieces = layout ? layout(name, shape) : std::vector<StoredPiece>{};
    if (pieces.empty()) pieces.push_back({name, shape});
    return pieces;
  };
  // The header needs every shape up front: the metadata has them, so values are never held
  // more than one at a time.
  std::vector<SafetensorsWriter::Entry> entries;
  {
    OpenCheckpoint c = open_checkpoint(dir, tag);
    auto add = [&](const std::string& name, const std::vector<int64_t>& shape) {
      int64_t covered = 0, numel = 1;
      for (int64_t d : shape) numel *= d;
      for (const StoredPiece& piece : pieces_of(name, shape)) {
        entries.push_back({piece.name, at::kFloat, piece.shape});
        int64_t n = 1;
        for (int64_t d : piece.shape) n *= d;
        covered += n;
      }
      ZT_INTERNAL_ASSERT(covered == numel, "stored layout of ", name, " covers ", covered, " of ",
                         numel, " elements");
    };
    for (const auto& p : c.meta.params)
      if (p.trainable) add(p.name, p.shape);
    for (const auto& [name, ref] : c.shards[0].frozen) add(name, ref.shape);
  }
  SafetensorsWriter w(out_path, std::move(entries));
  for_each_consolidated(dir, tag, "master", [&](const std::string& name, const at::Tensor& t) {
    const at::Tensor flat = t.to(at::kFloat).reshape({-1});
    int64_t offset = 0;
    for (const StoredPiece& piece : pieces_of(name, t.sizes().vec())) {
      int64_t n = 1;
      for (int64_t d : piece.shape) n *= d;
      w.write(piece.name, flat.narrow(0, offset, n).view(piece.shape));
      offset += n;
    }
  });
  w.commit();
}

}  // namespace zt
