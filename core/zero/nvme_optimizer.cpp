#include "core/zero/nvme_optimizer.h"

#include <algorithm>

#include "base/error.h"
#include "base/logging.h"
#include "core/aio/swap_directory.h"

namespace zt::zero {
namespace {

constexpr const char* kOptimizerPathKey = "zero_optimization.offload_optimizer.nvme_path";

int64_t region_bytes(int64_t numel, int64_t element_bytes) {
  return aio::align_up(numel * element_bytes);
}

}  // namespace

int64_t NvmeOptimizerSwapper::chunk_bytes(int64_t numel, int64_t states,
                                          int64_t master_element_bytes, int64_t state_element_bytes,
                                          int64_t grad_element_bytes) {
  return region_bytes(numel, master_element_bytes) +
         states * region_bytes(numel, state_element_bytes) +
         region_bytes(numel, grad_element_bytes);
}

int64_t NvmeOptimizerSwapper::grad_staging_bytes(int64_t largest_chunk,
                                                 int64_t grad_element_bytes) {
  if (grad_element_bytes == 0 || largest_chunk == 0) return 0;
  return 2 * std::min(kGradSpillPiece, region_bytes(largest_chunk, grad_element_bytes));
}

int64_t NvmeOptimizerSwapper::bytes_of(int64_t numel) const {
  return chunk_bytes(numel, static_cast<int64_t>(state_names_.size()),
                     c10::elementSize(master_dtype_), c10::elementSize(state_dtype_),
                     holds_grads() ? c10::elementSize(grad_dtype_) : 0);
}

int64_t NvmeOptimizerSwapper::master_offset(int64_t numel) const {
  return holds_grads() ? region_bytes(numel, c10::elementSize(grad_dtype_)) : 0;
}

NvmeOptimizerSwapper::NvmeOptimizerSwapper(const OffloadConfig& options, int64_t sub_group_size,
                                           const aio::AioOptions& aio, int rank,
                                           const std::vector<int64_t>& slot_numels,
                                           std::vector<std::string> state_names,
                                           at::ScalarType master_dtype, at::ScalarType state_dtype,
                                           at::ScalarType grad_dtype)
    : options_(options),
      sub_group_size_(sub_group_size),
      aio_options_(aio),
      rank_(rank),
      state_names_(std::move(state_names)),
      master_dtype_(master_dtype),
      state_dtype_(state_dtype),
      grad_dtype_(grad_dtype) {
  ZT_CHECK(!options_.nvme_path.empty(), kOptimizerPathKey, " is empty");
  ZT_CHECK(sub_group_size_ >= 1, "zero_optimization.sub_group_size must be >= 1, got ",
           sub_group_size_);
  ZT_CHECK(options_.buffer_count >= 1,
           "zero_optimization.offload_optimizer.buffer_count must be >= 1 with nvme, got ",
           options_.buffer_count);
  int64_t needed = 0, largest = 0, largest_numel = 0;
  chunks_of_slot_.resize(slot_numels.size());
  for (size_t s = 0; s < slot_numels.size(); ++s) {
    for (int64_t b = 0; b < slot_numels[s]; b += sub_group_size_) {
      const int64_t n = std::min(sub_group_size_, slot_numels[s] - b);
      chunks_of_slot_[s].push_back(chunks_.size());
      chunks_.push_back({s, b, n, nullptr});
      needed += bytes_of(n);
      largest = std::max(largest, bytes_of(n));
      largest_numel = std::max(largest_numel, n);
    }
  }
  dir_ = std::make_unique<aio::SwapDirectory>(kOptimizerPathKey, options_.nvme_path, "optimizer",
                                              rank_, needed, "NVMe optimizer offload");
  try {
    open_files_and_buffers(largest);
    if (holds_grads()) {
      const int64_t staging = grad_staging_bytes(largest_numel, c10::elementSize(grad_dtype_)) / 2;
      for (int i = 0; i < 2 && staging > 0; ++i) grad_staging_.emplace_back(staging);
    }
  } catch (...) {
    chunks_.clear();  // closes the files before the directory goes
    dir_.reset();
    throw;
  }
  ZT_LOG_INFO("NVMe optimizer offload: ", chunks_.size(), " chunk file(s), ", needed, " bytes in ",
              dir_->path(), ", streamed through ", buffers_.size(), " buffer(s) of ", largest,
              " bytes (", aio_->uses_io_uring() ? "io_uring" : "pread/pwrite",
              chunks_.empty() || chunks_.front().file->direct() ? ", O_DIRECT" : ", buffered", ")",
              holds_grads() ? "; the reduced gradients wait there too" : "");
}

void NvmeOptimizerSwapper::open_files_and_buffers(int64_t largest) {
  for (auto& c : chunks_) {
    c.file = std::make_unique<aio::AioFile>(dir_->path() + "/buffer" + std::to_string(c.slot) +
                                                "_chunk" +
                                                std::to_string(c.begin / sub_group_size_) + ".swp",
                                            /*create=*/true);
  }
  aio_ = std::make_unique<aio::AioHandle>(aio_options_);
  const int64_t count = std::min<int64_t>(
      options_.buffer_count, std::max<int64_t>(1, static_cast<int64_t>(chunks_.size())));
  for (int64_t i = 0; i < count; ++i) buffers_.emplace_back(largest);
  buffer_writes_.resize(buffers_.size());
}

NvmeOptimizerSwapper::~NvmeOptimizerSwapper() {
  for (auto& t : buffer_writes_) {
    try {
      aio::AioHandle::wait(t);
    } catch (const std::exception&) {  // already reported by the step that started it
    }
  }
  chunks_.clear();  // closes the files before the directory goes
  dir_.reset();
}

int64_t NvmeOptimizerSwapper::nvme_bytes() const {
  int64_t n = 0;
  for (const auto& c : chunks_) n += bytes_of(c.numel);
  return n;
}

int64_t NvmeOptimizerSwapper::buffer_bytes() const {
  int64_t n = 0;
  for (const auto& b : buffers_) n += b.capacity();
  for (const auto& b : grad_staging_) n += b.capacity();
  return n;
}

std::vector<NvmeOptimizerSwapper::ChunkLocation> NvmeOptimizerSwapper::chunk_files(
    size_t slot) const {
  std::vector<ChunkLocation> out;
  for (size_t i : chunks_of_slot_.at(slot)) {
    const ChunkFile& c = chunks_[i];
    ChunkLocation l{c.file->path(), c.begin, c.numel, {}};
    const int64_t at = master_offset(c.numel);
    const int64_t master = region_bytes(c.numel, c10::elementSize(master_dtype_));
    const int64_t region = region_bytes(c.numel, c10::elementSize(state_dtype_));
    for (size_t s = 0; s <= state_names_.size(); ++s) {
      l.offsets.push_back(at + (s == 0 ? 0 : master + static_cast<int64_t>(s - 1) * region));
    }
    out.push_back(std::move(l));
  }
  return out;
}

NvmeOptimizerSwapper::Chunk NvmeOptimizerSwapper::views(const ChunkFile& c,
                                                        const aio::AlignedBuffer& buf) const {
  Chunk ch;
  ch.slot = c.slot;
  ch.begin = c.begin;
  ch.numel = c.numel;
  const int64_t at = master_offset(c.numel);
  const int64_t master = region_bytes(c.numel, c10::elementSize(master_dtype_));
  const int64_t region = region_bytes(c.numel, c10::elementSize(state_dtype_));
  ch.master = buf.view(master_dtype_, at, c.numel);
  for (size_t s = 0; s < state_names_.size(); ++s) {
    ch.states.push_back(
        buf.view(state_dtype_, at + master + static_cast<int64_t>(s) * region, c.numel));
  }
  return ch;
}

// A slot's gradient crosses in pieces of one staging buffer, page-aligned in the file (O_DIRECT);
// a write copies piece k+1 while piece k is on its way, a read copies piece k out while k+1 comes
// in. The last piece of a chunk covers its region's padding too.
void NvmeOptimizerSwapper::move_grads(size_t slot, const at::Tensor& t, bool write) {
  ZT_INTERNAL_ASSERT(holds_grads() && !grad_staging_.empty(), "no gradient region to move");
  ZT_INTERNAL_ASSERT(t.scalar_type() == grad_dtype_ && t.is_contiguous(),
                     "a spilled gradient in another dtype or layout");
  const int64_t esize = static_cast<int64_t>(c10::elementSize(grad_dtype_));
  const int64_t piece = grad_staging_.front().capacity();
  struct Piece {
    ChunkFile* chunk;
    int64_t at;     // element offset in the slot
    int64_t numel;  // elements of the slot in it
    int64_t off;    // byte offset in the file
    int64_t bytes;  // bytes moved (page-rounded)
  };
  std::vector<Piece> pieces;
  for (size_t i : chunks_of_slot_.at(slot)) {
    ChunkFile& c = chunks_[i];
    const int64_t region = region_bytes(c.numel, esize);
    for (int64_t b = 0; b < region; b += piece) {
      const int64_t first = b / esize;
      const int64_t n = std::max<int64_t>(0, std::min(piece / esize, c.numel - first));
      pieces.push_back({&c, c.begin + first, n, b, std::min(piece, region - b)});
    }
  }
  std::vector<aio::AioHandle::Ticket> tickets(grad_staging_.size());
  auto staged = [&](size_t k) -> aio::AlignedBuffer& {
    return grad_staging_[k % grad_staging_.size()];
  };
  auto wait_buffer = [&](size_t k) {
    aio::AioHandle::Ticket t = std::move(tickets[k % tickets.size()]);
    tickets[k % tickets.size()].reset();
    aio::AioHandle::wait(t);
  };
  auto start = [&](size_t k) {
    const Piece& p = pieces[k];
    void* data = staged(k).data();
    tickets[k % tickets.size()] = write ? aio_->start_write(*p.chunk->file, data, p.bytes, p.off)
                                        : aio_->start_read(*p.chunk->file, data, p.bytes, p.off);
  };
  try {
    if (!write && !pieces.empty()) start(0);
    for (size_t k = 0; k < pieces.size(); ++k) {
      const Piece& p = pieces[k];
      if (write) {
        wait_buffer(k);  // the buffer's previous piece has landed
        if (p.numel > 0) {
          staged(k).view(grad_dtype_, 0, p.numel).copy_(t.narrow(0, p.at, p.numel));
        }
        start(k);
      } else {
        wait_buffer(k);
        if (k + 1 < pieces.size()) start(k + 1);
        if (p.numel > 0) {
          t.narrow(0, p.at, p.numel).copy_(staged(k).view(grad_dtype_, 0, p.numel));
        }
      }
    }
    for (size_t k = 0; k < tickets.size(); ++k) wait_buffer(k);
  } catch (...) {
    for (auto& ticket : tickets) {
      try {
        aio::AioHandle::wait(ticket);
      } catch (const std::exception&) {
      }
    }
    throw;
  }
}

void NvmeOptimizerSwapper::write(size_t slot, const at::Tensor& grad) {
  move_grads(slot, grad, /*write=*/true);
}

void NvmeOptimizerSwapper::read(size_t slot, const at::Tensor& into) {
  move_grads(slot, into, /*write=*/false);
}

void NvmeOptimizerSwapper::for_each_chunk(const std::vector<size_t>& slots, const ChunkFn& fn,
                                          bool read, bool write_back, bool with_grads) {
  ZT_INTERNAL_ASSERT(!with_grads || holds_grads(), "the chunk files hold no gradients");
  std::vector<size_t> seq;
  for (size_t s : slots) {
    seq.insert(seq.end(), chunks_of_slot_[s].begin(), chunks_of_slot_[s].end());
  }
  const size_t count = buffers_.size();
  // Read-ahead never reaches the buffer of the chunk being stepped; with 3+ buffers it leaves one
  // for the write of the previous chunk.
  const size_t ahead = options_.pipeline_read
                           ? std::min(count - 1, std::max<size_t>(1, count > 2 ? count - 2 : 1))
                           : 0;
  std::vector<aio::AioHandle::Ticket> reads(seq.size());
  size_t next_read = 0;
  auto take_buffer = [&](size_t i) {  // the buffer's previous write must have landed
    aio::AioHandle::Ticket t = std::move(buffer_writes_[i % count]);
    buffer_writes_[i % count].reset();
    aio::AioHandle::wait(t);
  };
  try {
    for (size_t i = 0; i < seq.size(); ++i) {
      const ChunkFile& c = chunks_[seq[i]];
      const aio::AlignedBuffer& buf = buffers_[i % count];
      // The gradient region (the file's first) is read when asked for and never written back.
      const int64_t kept = master_offset(c.numel);
      if (read) {
        for (; next_read < seq.size() && next_read <= i + ahead; ++next_read) {
          take_buffer(next_read);
          const ChunkFile& r = chunks_[seq[next_read]];
          const int64_t from = with_grads ? 0 : master_offset(r.numel);
          reads[next_read] = aio_->start_read(
              *r.file, static_cast<char*>(buffers_[next_read % count].data()) + from,
              bytes_of(r.numel) - from, from);
        }
        aio::AioHandle::wait(reads[i]);
      } else {
        take_buffer(i);
      }
      Chunk ch = views(c, buf);
      if (with_grads) ch.grad = buf.view(grad_dtype_, 0, c.numel);
      fn(ch);
      if (write_back) {
        if (write_gate_) write_gate_(c.slot);
        buffer_writes_[i % count] = aio_->start_write(
            *c.file, static_cast<char*>(buf.data()) + kept, bytes_of(c.numel) - kept, kept);
        if (!options_.pipeline_write) aio::AioHandle::wait(buffer_writes_[i % count]);
      }
    }
    for (auto& t : buffer_writes_) {
      aio::AioHandle::Ticket done = std::move(t);
      t.reset();
      aio::AioHandle::wait(done);
    }
  } catch (...) {
    // No transfer may outlive this call with a buffer in use: drain, then report the first error.
    for (auto& t : reads) {
      try {
        aio::AioHandle::wait(t);
      } catch (const std::exception&) {
      }
    }
    for (auto& t : buffer_writes_) {
      try {
        aio::AioHandle::wait(t);
      } catch (const std::exception&) {
      }
      t.reset();
    }
    throw;
  }
}

}  // namespace zt::zero
