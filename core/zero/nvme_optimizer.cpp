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
                                          int64_t master_element_bytes,
                                          int64_t state_element_bytes) {
  return region_bytes(numel, master_element_bytes) +
         states * region_bytes(numel, state_element_bytes);
}

int64_t NvmeOptimizerSwapper::bytes_of(int64_t numel) const {
  return chunk_bytes(numel, static_cast<int64_t>(state_names_.size()),
                     c10::elementSize(master_dtype_), c10::elementSize(state_dtype_));
}

NvmeOptimizerSwapper::NvmeOptimizerSwapper(const OffloadConfig& options, int64_t sub_group_size,
                                           const aio::AioOptions& aio, int rank,
                                           const std::vector<int64_t>& slot_numels,
                                           std::vector<std::string> state_names,
                                           at::ScalarType master_dtype, at::ScalarType state_dtype)
    : options_(options),
      sub_group_size_(sub_group_size),
      aio_options_(aio),
      rank_(rank),
      state_names_(std::move(state_names)),
      master_dtype_(master_dtype),
      state_dtype_(state_dtype) {
  ZT_CHECK(!options_.nvme_path.empty(), kOptimizerPathKey, " is empty");
  ZT_CHECK(sub_group_size_ >= 1, "zero_optimization.sub_group_size must be >= 1, got ",
           sub_group_size_);
  ZT_CHECK(options_.buffer_count >= 1,
           "zero_optimization.offload_optimizer.buffer_count must be >= 1 with nvme, got ",
           options_.buffer_count);
  int64_t needed = 0, largest = 0;
  chunks_of_slot_.resize(slot_numels.size());
  for (size_t s = 0; s < slot_numels.size(); ++s) {
    for (int64_t b = 0; b < slot_numels[s]; b += sub_group_size_) {
      const int64_t n = std::min(sub_group_size_, slot_numels[s] - b);
      chunks_of_slot_[s].push_back(chunks_.size());
      chunks_.push_back({s, b, n, nullptr});
      needed += bytes_of(n);
      largest = std::max(largest, bytes_of(n));
    }
  }
  dir_ = std::make_unique<aio::SwapDirectory>(kOptimizerPathKey, options_.nvme_path, "optimizer",
                                              rank_, needed, "NVMe optimizer offload");
  try {
    open_files_and_buffers(largest);
  } catch (...) {
    chunks_.clear();  // closes the files before the directory goes
    dir_.reset();
    throw;
  }
  ZT_LOG_INFO("NVMe optimizer offload: ", chunks_.size(), " chunk file(s), ", needed, " bytes in ",
              dir_->path(), ", streamed through ", buffers_.size(), " buffer(s) of ", largest,
              " bytes (", aio_->uses_io_uring() ? "io_uring" : "pread/pwrite",
              chunks_.empty() || chunks_.front().file->direct() ? ", O_DIRECT" : ", buffered", ")");
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
  return n;
}

std::vector<NvmeOptimizerSwapper::ChunkLocation> NvmeOptimizerSwapper::chunk_files(
    size_t slot) const {
  std::vector<ChunkLocation> out;
  for (size_t i : chunks_of_slot_.at(slot)) {
    const ChunkFile& c = chunks_[i];
    ChunkLocation l{c.file->path(), c.begin, c.numel, {}};
    const int64_t master = region_bytes(c.numel, c10::elementSize(master_dtype_));
    const int64_t region = region_bytes(c.numel, c10::elementSize(state_dtype_));
    for (size_t s = 0; s <= state_names_.size(); ++s) {
      l.offsets.push_back(s == 0 ? 0 : master + static_cast<int64_t>(s - 1) * region);
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
  const int64_t master = region_bytes(c.numel, c10::elementSize(master_dtype_));
  const int64_t region = region_bytes(c.numel, c10::elementSize(state_dtype_));
  ch.master = buf.view(master_dtype_, 0, c.numel);
  for (size_t s = 0; s < state_names_.size(); ++s) {
    ch.states.push_back(buf.view(state_dtype_, master + static_cast<int64_t>(s) * region, c.numel));
  }
  return ch;
}

void NvmeOptimizerSwapper::for_each_chunk(const std::vector<size_t>& slots, const ChunkFn& fn,
                                          bool read, bool write_back) {
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
      const int64_t bytes = bytes_of(c.numel);
      if (read) {
        for (; next_read < seq.size() && next_read <= i + ahead; ++next_read) {
          take_buffer(next_read);
          const ChunkFile& r = chunks_[seq[next_read]];
          reads[next_read] =
              aio_->start_read(*r.file, buffers_[next_read % count].data(), bytes_of(r.numel), 0);
        }
        aio::AioHandle::wait(reads[i]);
      } else {
        take_buffer(i);
      }
      Chunk ch = views(c, buf);
      fn(ch);
      if (write_back) {
        if (write_gate_) write_gate_(c.slot);
        buffer_writes_[i % count] = aio_->start_write(*c.file, buf.data(), bytes, 0);
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
