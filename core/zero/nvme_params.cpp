#include "core/zero/nvme_params.h"

#include <algorithm>
#include <utility>

#include "base/error.h"
#include "base/logging.h"

namespace zt::zero {
namespace {

constexpr const char* kParamPathKey = "zero_optimization.offload_param.nvme_path";

}  // namespace

NvmeParamSwapper::NvmeParamSwapper(const OffloadConfig& options, const aio::AioOptions& aio,
                                   int rank, at::ScalarType dtype,
                                   const std::vector<int64_t>& slot_numels)
    : options_(options), aio_options_(aio), dtype_(dtype), element_size_(c10::elementSize(dtype)) {
  ZT_CHECK(!options_.nvme_path.empty(), kParamPathKey, " is empty");
  ZT_CHECK(options_.buffer_count >= 1,
           "zero_optimization.offload_param.buffer_count must be >= 1 with device nvme, got ",
           options_.buffer_count);
  int64_t needed = 0, largest = 0;
  size_t files = 0;
  for (int64_t n : slot_numels) {
    needed += n > 0 ? file_bytes(n) : 0;
    largest = std::max(largest, n);
    files += n > 0 ? 1 : 0;
  }
  // DeepSpeed asserts a partition fits one swap buffer; here the flat buffer's shard must.
  ZT_CHECK(largest <= options_.buffer_size, "zero_optimization.offload_param.buffer_size ",
           options_.buffer_size, " is smaller than the largest parameter shard on NVMe (", largest,
           " elements); raise it, or lower zero_optimization.reduce_bucket_size");
  dir_ = std::make_unique<aio::SwapDirectory>(kParamPathKey, options_.nvme_path, "params", rank,
                                              needed, "NVMe parameter offload");
  slots_.resize(slot_numels.size());
  try {
    for (size_t s = 0; s < slot_numels.size(); ++s) {
      slots_[s].numel = slot_numels[s];
      if (slot_numels[s] == 0) continue;
      slots_[s].file = std::make_unique<aio::AioFile>(
          dir_->path() + "/buffer" + std::to_string(s) + ".swp", /*create=*/true);
    }
    aio_ = std::make_unique<aio::AioHandle>(aio_options_);
    // No more buffers than files: a buffer beyond that would never be used.
    const int64_t count =
        std::min<int64_t>(options_.buffer_count, std::max<int64_t>(1, static_cast<int64_t>(files)));
    buffers_.resize(static_cast<size_t>(count));
    for (auto& b : buffers_)
      b.memory = aio::AlignedBuffer(file_bytes(std::max<int64_t>(largest, 1)));
  } catch (...) {
    slots_.clear();  // closes the files before the directory goes
    dir_.reset();
    throw;
  }
  ZT_LOG_INFO("NVMe parameter offload: ", files, " shard file(s), ", needed, " bytes in ",
              dir_->path(), ", through ", buffers_.size(), " buffer(s) of ",
              buffers_.empty() ? 0 : buffers_.front().memory.capacity(), " bytes (",
              aio_->uses_io_uring() ? "io_uring" : "pread/pwrite", ")");
}

NvmeParamSwapper::~NvmeParamSwapper() {
  for (auto& b : buffers_) {
    try {
      aio::AioHandle::wait(b.ticket);
    } catch (const std::exception&) {  // already reported by the call that waited on it
    }
  }
  aio_.reset();
  slots_.clear();
  dir_.reset();
}

int64_t NvmeParamSwapper::file_bytes(int64_t numel) const {
  return aio::align_up(numel * element_size_);
}

void NvmeParamSwapper::settle(Buffer& b) {
  aio::AioHandle::Ticket t = std::move(b.ticket);
  b.ticket.reset();
  try {
    aio::AioHandle::wait(t);
  } catch (...) {
    // The buffer's contents are not the file's: forget them.
    slots_[b.slot].buffer = -1;
    b.state = State::kFree;
    throw;
  }
  if (b.state == State::kReading) b.state = State::kReady;
}

int NvmeParamSwapper::take_buffer(bool may_wait) {
  // The buffer in state s that began it first (or last, newest).
  auto pick = [&](State s, bool newest) {
    int best = -1;
    for (size_t i = 0; i < buffers_.size(); ++i) {
      if (buffers_[i].state != s) continue;
      if (best < 0 ||
          (newest ? buffers_[i].age > buffers_[best].age : buffers_[i].age < buffers_[best].age)) {
        best = static_cast<int>(i);
      }
    }
    return best;
  };
  int i = pick(State::kFree, false);
  if (i >= 0 || !may_wait) return i;
  // A finished write's values are in the file; an unused read-ahead can be read again later.
  // Read-aheads are started in the order of use, so the newest is needed last.
  for (auto [s, newest] : {std::pair{State::kWriting, false}, std::pair{State::kReady, true},
                           std::pair{State::kReading, true}}) {
    i = pick(s, newest);
    if (i < 0) continue;
    Buffer& b = buffers_[static_cast<size_t>(i)];
    settle(b);
    slots_[b.slot].buffer = -1;
    b.state = State::kFree;
    return i;
  }
  return -1;
}

void NvmeParamSwapper::prefetch(size_t slot) {
  if (!swapped(slot) || slots_[slot].buffer >= 0) return;
  const int i = take_buffer(/*may_wait=*/false);
  if (i < 0) return;
  Buffer& b = buffers_[static_cast<size_t>(i)];
  Slot& s = slots_[slot];
  b.ticket = aio_->start_read(*s.file, b.memory.data(), file_bytes(s.numel), 0);
  b.state = State::kReading;
  b.slot = slot;
  b.age = ++clock_;
  s.buffer = i;
}

at::Tensor NvmeParamSwapper::acquire(size_t slot, bool read) {
  ZT_INTERNAL_ASSERT(swapped(slot), "slot ", slot, " does not live on NVMe");
  Slot& s = slots_[slot];
  if (s.buffer >= 0) {
    Buffer& b = buffers_[static_cast<size_t>(s.buffer)];
    ZT_INTERNAL_ASSERT(b.state != State::kHeld, "parameter shard ", slot, " acquired twice");
    // A read-ahead, or this slot's own write: either way the buffer holds the file's values.
    settle(b);
    b.state = State::kHeld;
    return b.memory.view(dtype_, 0, s.numel);
  }
  const int i = take_buffer(/*may_wait=*/true);
  ZT_CHECK(i >= 0, "zero_optimization.offload_param.buffer_count ", buffers_.size(),
           ": every buffer is in use; raise it");
  Buffer& b = buffers_[static_cast<size_t>(i)];
  if (read) aio_->read(*s.file, b.memory.data(), file_bytes(s.numel), 0);
  b.state = State::kHeld;
  b.slot = slot;
  b.age = ++clock_;
  s.buffer = i;
  return b.memory.view(dtype_, 0, s.numel);
}

void NvmeParamSwapper::release(size_t slot, bool write_back) {
  Slot& s = slots_[slot];
  ZT_INTERNAL_ASSERT(s.buffer >= 0 && buffers_[static_cast<size_t>(s.buffer)].state == State::kHeld,
                     "parameter shard ", slot, " released without acquire");
  Buffer& b = buffers_[static_cast<size_t>(s.buffer)];
  b.age = ++clock_;
  if (write_back) {
    b.ticket = aio_->start_write(*s.file, b.memory.data(), file_bytes(s.numel), 0);
    b.state = State::kWriting;
  } else {
    b.state = State::kFree;
    s.buffer = -1;
  }
}

void NvmeParamSwapper::wait_writes() {
  for (auto& b : buffers_) {
    if (b.state != State::kWriting) continue;
    settle(b);
    slots_[b.slot].buffer = -1;
    b.state = State::kFree;
  }
}

int64_t NvmeParamSwapper::nvme_bytes() const {
  int64_t n = 0;
  for (const auto& s : slots_) n += s.file ? file_bytes(s.numel) : 0;
  return n;
}

int64_t NvmeParamSwapper::buffer_bytes() const {
  int64_t n = 0;
  for (const auto& b : buffers_) n += b.memory.capacity();
  return n;
}

}  // namespace zt::zero
