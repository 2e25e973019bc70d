#include "core/checkpoint/async_checkpoint.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "base/error.h"
#include "base/logging.h"
#include "core/aio/aio_file.h"
#include "core/aio/aio_handle.h"
#include "core/aio/aligned_buffer.h"
#include "core/checkpoint/format.h"
#include "core/checkpoint/save_parts.h"
#include "core/zero/master_store.h"
#include "parallel/communicator.h"
#include "parallel/topology.h"

namespace zt {
namespace fs = std::filesystem;
using namespace checkpoint_detail;

namespace {

using Clock = std::chrono::steady_clock;

double async_seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// `dst` holding a copy of `src` on the host, reusing dst's memory when it fits.
void copy_into(at::Tensor& dst, const at::Tensor& src) {
  if (!dst.defined() || dst.sizes() != src.sizes() || dst.scalar_type() != src.scalar_type()) {
    dst = at::empty(src.sizes(), src.options().device(at::kCPU));
  }
  dst.copy_(src);
}

// Streams one state of a buffer from the store's chunk files into a shard file: a tensor record
// of `n` fp32 values, read through O_DIRECT in pieces (two buffers: the next piece is read while
// the last one is written), so host memory stays at two pieces whatever the buffer's size. Files
// of a 16-bit store (bf16 master or state) are widened to fp32 a piece at a time, so a checkpoint
// holds the same records whatever dtypes the store keeps.
class FileStreamer {
 public:
  explicit FileStreamer(const aio::AioOptions& options)
      : aio_(options), pieces_{aio::AlignedBuffer(kPiece), aio::AlignedBuffer(kPiece)} {}

  // which: 0 the master, 1 + i state i (MasterStore::FileChunk::offsets).
  void stream(ckpt::ShardWriter& w, const std::vector<zero::MasterStore::FileChunk>& chunks,
              size_t which, int64_t n, at::ScalarType dtype) {
    w.tensor_header(at::kFloat, {n});
    const int64_t es = static_cast<int64_t>(c10::elementSize(dtype));
    struct Piece {
      const zero::MasterStore::FileChunk* chunk;
      int64_t offset, bytes;
    };
    std::vector<Piece> plan;
    int64_t total = 0;
    for (const auto& c : chunks) {
      const int64_t bytes = c.numel * es;
      for (int64_t at = 0; at < bytes; at += kPiece) {
        plan.push_back({&c, c.offsets.at(which) + at, std::min(kPiece, bytes - at)});
      }
      total += c.numel;
    }
    ZT_INTERNAL_ASSERT(total == n, "the store's files hold ", total, " values, expected ", n);
    aio::AioHandle::Ticket reading;
    auto start = [&](size_t i) {
      if (i == 0 || plan[i].chunk != plan[i - 1].chunk) {
        file_ = std::make_unique<aio::AioFile>(plan[i].chunk->path, /*create=*/false);
      }
      reading = aio_.start_read(*file_, pieces_[i % 2].data(), plan[i].bytes, plan[i].offset);
    };
    try {
      if (!plan.empty()) start(0);
      for (size_t i = 0; i < plan.size(); ++i) {
        aio::AioHandle::wait(reading);  // piece i is in its buffer; its file is read no more
        reading.reset();
        if (i + 1 < plan.size()) start(i + 1);
        if (dtype == at::kFloat) {
          w.bytes(pieces_[i % 2].data(), static_cast<size_t>(plan[i].bytes));
        } else {
          const at::Tensor wide = pieces_[i % 2].view(dtype, 0, plan[i].bytes / es).to(at::kFloat);
          w.bytes(wide.data_ptr(), static_cast<size_t>(wide.nbytes()));
        }
      }
    } catch (...) {
      // No read may outlive the buffers it fills.
      try {
        aio::AioHandle::wait(reading);
      } catch (const std::exception&) {
      }
      throw;
    }
    file_.reset();
  }

 private:
  static constexpr int64_t kPiece = 16 << 20;
  aio::AioHandle aio_;
  aio::AlignedBuffer pieces_[2];
  std::unique_ptr<aio::AioFile> file_;
};

// What this rank's write reports to the commit, per rank: state (1 written, 0 still writing, -1
// failed), shard number (-1: not a writer), file size, checksum.
constexpr int64_t kWritten = 1, kWriting = 0, kFailed = -1;

}  // namespace

// How far the background write has read a store's swap files (offload_optimizer nvme): the step
// rewrites a slot's files only once the write has read them (MasterStore::set_write_gate), so the
// checkpoint holds the values of the save's step without a copy of them in host memory.
struct AsyncCheckpointer::FileGate {
  std::mutex m;
  std::condition_variable cv;
  size_t slots_read = 0;  // slots [0, slots_read) are read
  bool open = false;      // the write is over (done or failed): nothing is held any more
  double held_s = 0;      // how long the step waited here

  void wait_for(size_t slot) {
    std::unique_lock<std::mutex> l(m);
    if (open || slot < slots_read) return;
    const auto t0 = Clock::now();
    cv.wait(l, [&] { return open || slot < slots_read; });
    held_s += async_seconds_since(t0);
  }
  void read_through(size_t slots) {
    {
      std::lock_guard<std::mutex> l(m);
      slots_read = slots;
    }
    cv.notify_all();
  }
  void open_all() {
    {
      std::lock_guard<std::mutex> l(m);
      open = true;
    }
    cv.notify_all();
  }
};

// This rank's shard, as save() found it: each buffer's layout, master and optimizer state, in
// the order the shard file holds them.
struct AsyncCheckpointer::Snapshot {
  struct Buffer {
    int64_t padded_numel = 0, stepped_begin = 0, stepped_end = 0;
    std::vector<ckpt::ShardBuffer::Entry> entries;
    at::Tensor master;                        // undefined when `files` holds it
    std::map<std::string, at::Tensor> state;  // the state held in memory
    // Every state key, sorted as the synchronous save writes them: -1 in `state`, else the index
    // of a state the store streams from `files` (offload_optimizer nvme).
    std::map<std::string, int> keys;
    std::vector<zero::MasterStore::FileChunk> files;
  };
  std::vector<Buffer> buffers;
  std::vector<std::pair<std::string, at::Tensor>> frozen;
  at::Tensor rng, device_rng;
  ClientState client;
  uint64_t bytes = 0;
  // The dtypes of the store's files (`files`), widened to fp32 records as they are streamed.
  at::ScalarType master_dtype = at::kFloat, state_dtype = at::kFloat;
};

struct AsyncCheckpointer::Pending {
  SaveTarget target;
  ckpt::Metadata meta;  // rank 0's: what the engine was at save()
  int64_t keep_last = 0;
  struct Written {
    uint64_t size = 0, fnv64 = 0;
    double seconds = 0;
    std::string error;  // empty: written
  };
  std::future<Written> write;      // invalid on ranks that write no shard, and once reported
  std::shared_ptr<FileGate> gate;  // offload_optimizer nvme: what the step waits on
  // What this rank tells the commit (state, shard, size, checksum as above); a rank that writes
  // no shard is written from the start.
  std::array<int64_t, 4> report = {kWriting, -1, 0, 0};
};

AsyncCheckpointer::AsyncCheckpointer(Engine& engine)
    : engine_(engine), snapshot_(std::make_unique<Snapshot>()) {}

AsyncCheckpointer::~AsyncCheckpointer() {
  if (pending_ && pending_->write.valid()) pending_->write.wait();
  if (pending_ && pending_->gate) engine_.master_store().set_write_gate(nullptr);
}

bool AsyncCheckpointer::in_flight() const {
  return pending_ != nullptr;
}

void AsyncCheckpointer::save(const std::string& dir, const std::string& tag,
                             const ClientState& client, const CheckpointOptions& options) {
  wait();  // at most one save in flight
  const auto start = Clock::now();
  auto pending = std::make_unique<Pending>();
  pending->target = begin_save(engine_, dir, tag);
  pending->keep_last = options.keep_last;
  const SaveTarget& target = pending->target;
  if (target.lead) pending->meta = metadata_now(engine_, options);
  if (!target.writer) pending->report = {kWritten, -1, 0, 0};
  if (target.writer) {
    Snapshot& snap = *snapshot_;
    zero::MasterStore& store = engine_.master_store();
    const bool from_files = !store.swap_directory().empty();
    snap.master_dtype = store.master_dtype();
    snap.state_dtype = store.state_dtype();
    auto states = engine_.shard_states();
    snap.bytes = shard_bytes_at_least(states, store.state_names().size());
    check_free_space(target.tag_dir, target.shard_path(), snap.bytes);
    snap.buffers.resize(states.size());
    at::NoGradGuard no_grad;
    for (size_t b = 0; b < states.size(); ++b) {
      const Engine::ShardState& s = states[b];
      Snapshot::Buffer& buf = snap.buffers[b];
      buf.padded_numel = s.layout->padded_numel();
      buf.stepped_begin = s.stepped.begin;
      buf.stepped_end = s.stepped.end;
      buf.entries.clear();
      for (const auto& e : s.layout->entries())
        buf.entries.push_back({e.name, e.range.begin, e.range.end});
      const int64_t n = s.stepped.size();
      buf.files.clear();
      if (from_files) {
        // The store's files stay as they are until the write has read them (the gate below).
        buf.files = store.file_chunks(b);
        buf.master = at::Tensor();
      } else {
        if (!buf.master.defined() || buf.master.numel() != n) {
          buf.master = at::empty({n}, at::TensorOptions().dtype(at::kFloat));
        }
      }
      std::map<std::string, at::Tensor> kept;
      buf.keys.clear();
      for (const auto& [k, t] : s.optimizer->state_dict()) {
        at::Tensor& dst = buf.state[k];
        copy_into(dst, t);
        kept[k] = dst;
        buf.keys[k] = -1;
      }
      const auto& names = store.state_names();
      if (!from_files) {
        // The master and the state a resident store holds (beside a bf16 master), as fp32
        // records like the synchronous save's.
        for (const auto& k : names) {
          at::Tensor& dst = buf.state[k];
          if (!dst.defined() || dst.numel() != n || dst.scalar_type() != at::kFloat) {
            dst = at::empty({n}, at::TensorOptions().dtype(at::kFloat));
          }
          kept[k] = dst;
          buf.keys[k] = -1;
        }
        store.for_each_chunk(
            {b},
            [&](zero::MasterChunk& c) {
              buf.master.narrow(0, c.begin, c.numel).copy_(c.master);
              for (size_t i = 0; i < names.size(); ++i) {
                kept[names[i]].narrow(0, c.begin, c.numel).copy_(c.states[i]);
              }
            },
            /*read=*/true, /*write_back=*/false);
      } else {
        for (size_t i = 0; i < names.size(); ++i) buf.keys[names[i]] = static_cast<int>(i);
      }
      buf.state = std::move(kept);
    }
    snap.frozen = frozen_parameters(engine_, target.lead);
    snap.rng = cpu_rng_state();
    snap.device_rng = device_rng_state(engine_.communicator().device());
    snap.client = client;
    std::shared_ptr<FileGate> gate;
    if (from_files) {
      gate = std::make_shared<FileGate>();
      store.set_write_gate([gate](size_t slot) { gate->wait_for(slot); });
      pending->gate = gate;
    }
    const aio::AioOptions aio = engine_.options().aio;
    pending->write = std::async(std::launch::async, [&snap, target, gate, aio] {
      Pending::Written out;
      const auto t0 = Clock::now();
      try {
        ckpt::ShardWriter w(target.shard_path().string(), target.shard_rank, target.shard_world,
                            snap.buffers.size(), snap.bytes);
        std::unique_ptr<FileStreamer> files;
        if (gate) files = std::make_unique<FileStreamer>(aio);
        for (size_t b = 0; b < snap.buffers.size(); ++b) {
          const Snapshot::Buffer& buf = snap.buffers[b];
          w.buffer(buf.padded_numel, buf.stepped_begin, buf.stepped_end, buf.entries);
          if (buf.master.defined()) {
            w.tensor(buf.master);
          } else {
            files->stream(w, buf.files, 0, buf.stepped_end - buf.stepped_begin, snap.master_dtype);
          }
          w.state_count(buf.keys.size());
          for (const auto& [k, i] : buf.keys) {
            w.state_key(k);
            if (i < 0) {
              w.tensor(buf.state.at(k));
            } else {
              files->stream(w, buf.files, static_cast<size_t>(i) + 1,
                            buf.stepped_end - buf.stepped_begin, snap.state_dtype);
            }
          }
          if (gate) gate->read_through(b + 1);
        }
        if (gate) gate->open_all();
        w.finish(snap.frozen, snap.rng, snap.device_rng, snap.client);
        fsync_dir(target.tag_dir);
        out.size = fs::file_size(target.shard_path());
        out.fnv64 = ckpt::fnv64_file(target.shard_path());
      } catch (const std::exception& e) {
        out.error = e.what();
      }
      if (gate) gate->open_all();
      out.seconds = async_seconds_since(t0);
      return out;
    });
  }
  pending_ = std::move(pending);
  stall_s_ = async_seconds_since(start);
}

bool AsyncCheckpointer::poll() {
  if (!pending_) return false;
  Pending& p = *pending_;
  if (p.write.valid() && p.write.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    const Pending::Written w = p.write.get();
    write_s_ = w.seconds;
    if (!w.error.empty()) {
      ZT_LOG_ERROR("checkpoint: background write of ", p.target.shard_path().string(),
                   " failed: ", w.error);
    }
    p.report = {w.error.empty() ? kWritten : kFailed, p.target.shard_rank,
                static_cast<int64_t>(w.size), 0};
    std::memcpy(&p.report[3], &w.fnv64, sizeof(uint64_t));
  }
  // Every rank's report, every tensor index included (each writes its own shard files).
  dist::Communicator& comm = *engine_.topology().all;
  const auto opts = at::TensorOptions().dtype(at::kLong);
  at::Tensor in =
      at::tensor(c10::ArrayRef<int64_t>(p.report.data(), p.report.size()), opts).to(comm.device());
  at::Tensor all = at::empty({comm.size() * 4}, opts.device(comm.device()));
  comm.all_gather(in, all)->wait();
  const at::Tensor host = all.to(at::kCPU);
  const int64_t* v = host.data_ptr<int64_t>();
  std::string failed;
  bool all_written = true;
  for (int r = 0; r < comm.size(); ++r) {
    if (v[4 * r] == kFailed) failed += (failed.empty() ? "" : ",") + std::to_string(r);
    if (v[4 * r] != kWritten) all_written = false;
  }
  if (!failed.empty()) {
    const std::string tag = p.target.tag;
    release();
    ZT_THROW("checkpoint: the background write of ", tag, " failed on rank(s) ", failed,
             " (their logs say why); `latest` still names the previous checkpoint");
  }
  if (!all_written) return false;
  if (p.target.lead) {
    ckpt::Metadata m = std::move(p.meta);
    m.shards.assign(static_cast<size_t>(p.target.shard_world), {});
    for (int r = 0; r < comm.size(); ++r) {
      const int64_t shard = v[4 * r + 1];
      if (shard < 0) continue;
      uint64_t fnv = 0;
      std::memcpy(&fnv, &v[4 * r + 3], sizeof(uint64_t));
      m.shards[static_cast<size_t>(shard)] = {ckpt::shard_file_name(static_cast<int>(shard)),
                                              static_cast<uint64_t>(v[4 * r + 2]), fnv};
    }
    commit_save(p.target, std::move(m), p.keep_last);
  }
  release();
  // As after a synchronous save: on every rank, once this returns, `latest` names the tag.
  comm.barrier()->wait();
  return true;
}

void AsyncCheckpointer::release() {
  held_s_ = 0;
  if (pending_ && pending_->gate) {
    engine_.master_store().set_write_gate(nullptr);
    std::lock_guard<std::mutex> l(pending_->gate->m);
    held_s_ = pending_->gate->held_s;
  }
  pending_.reset();
}

void AsyncCheckpointer::wait() {
  if (!pending_) return;
  if (pending_->write.valid()) pending_->write.wait();
  ZT_INTERNAL_ASSERT(poll(), "a save whose writes are all over did not commit");
}

}  // namespace zt
