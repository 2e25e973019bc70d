#pragma once
// NvmeParamSwapper: stage-3 16-bit parameter shards in files (ZeRO-Infinity's parameter offload,
// offload_param.device nvme; DeepSpeed's AsyncPartitionedParameterSwapper in
// deepspeed/runtime/swap_tensor/partitioned_param_swapper.py). One file per flat buffer ("slot")
// whose shard lives on NVMe:
//
//   <nvme_path>/zerotorch_params_rank<r>_pid<p>/buffer<b>.swp   [ shard (n,) compute dtype | pad ]
//
// The shards move through buffer_count host buffers (DeepSpeed's offload_param.buffer_count),
// each the size of the largest shard, which must be within buffer_size elements (DeepSpeed's
// offload_param.buffer_size; else an error naming it). A buffer is one of
//
//   free      nothing in it
//   reading   a read-ahead of slot b in flight (prefetch)
//   ready     slot b's shard, read (prefetched, not yet used)
//   held      checked out (acquire) until release
//   writing   slot b's new values on their way to the file (release with write_back)
//
// Use: the parameter gather reads a shard (acquire → copy into the gathered buffer → release), so a
// buffer is held only for that copy; ParamGather prefetches the shards of the units it will
// gather next. The optimizer step acquires a slot's buffer without reading (it writes every
// element), and releases it with write_back, which starts the write and returns. Reads and writes
// share one aio handle, whose transfers run in the order they were started, so a read after a
// write of the same file sees the written bytes. When no buffer is free, acquire takes the oldest
// write's buffer (waiting for it) or drops a read-ahead nobody used yet.
//
// Which shards go to NVMe (DeepSpeed's max_in_cpu): the flat buffers in order keep their shards in
// host memory while the elements kept so far stay within max_in_cpu; the rest live in files. The
// engine decides and hands only the NVMe ones here.
//
// Memory: buffer_count * the largest shard's bytes in RAM instead of the shards' bytes.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/aio/aio_file.h"
#include "core/aio/aio_handle.h"
#include "core/aio/aio_options.h"
#include "core/aio/aligned_buffer.h"
#include "core/aio/swap_directory.h"
#include "core/config/zero_config.h"

namespace zt::zero {

class NvmeParamSwapper {
 public:
  // slot_numels[b]: elements of slot b's shard, or 0 for a slot that does not live on NVMe.
  // options: zero_optimization.offload_param. Checks options.nvme_path first (SwapDirectory);
  // errors name the key, the path and the bytes.
  NvmeParamSwapper(const OffloadConfig& options, const aio::AioOptions& aio, int rank,
                   at::ScalarType dtype, const std::vector<int64_t>& slot_numels);
  ~NvmeParamSwapper();
  NvmeParamSwapper(const NvmeParamSwapper&) = delete;
  NvmeParamSwapper& operator=(const NvmeParamSwapper&) = delete;

  bool swapped(size_t slot) const { return slot < slots_.size() && slots_[slot].file != nullptr; }
  // Starts reading slot's shard into a free buffer; does nothing when it is already in a buffer,
  // or when no buffer is free (a read-ahead never waits).
  void prefetch(size_t slot);
  // Slot's shard as a (numel,) tensor over a host buffer, held until release(slot). read: the
  // file's values (waiting for a read-ahead, or reading now); false: the buffer's elements are
  // unspecified and the caller writes them all.
  at::Tensor acquire(size_t slot, bool read);
  // Gives slot's buffer back; write_back: its values go to the file first (asynchronously).
  void release(size_t slot, bool write_back);
  // Every write started so far has landed (throws the first I/O error, naming file and offset).
  void wait_writes();

  int64_t nvme_bytes() const;    // bytes of this rank's files
  int64_t buffer_bytes() const;  // host bytes of the buffers
  const std::string& directory() const { return dir_->path(); }

 private:
  enum class State { kFree, kReading, kReady, kHeld, kWriting };
  struct Buffer {
    aio::AlignedBuffer memory;
    State state = State::kFree;
    size_t slot = 0;
    aio::AioHandle::Ticket ticket;  // the read or write in flight
    uint64_t age = 0;               // when the current state began, for picking the oldest
  };
  struct Slot {
    int64_t numel = 0;
    std::unique_ptr<aio::AioFile> file;
    int buffer = -1;  // the buffer holding (or reading, or holding for writing) this slot
  };
  int64_t file_bytes(int64_t numel) const;
  // A buffer to put a new shard in: free, else the oldest write (waited), else the oldest unused
  // read-ahead (dropped). -1 when every buffer is held (for prefetch: when none is free at once).
  int take_buffer(bool may_wait);
  void settle(Buffer& b);  // waits for its transfer; a finished write frees it

  OffloadConfig options_;
  aio::AioOptions aio_options_;
  at::ScalarType dtype_;
  int64_t element_size_;
  std::unique_ptr<aio::SwapDirectory> dir_;
  std::vector<Slot> slots_;
  std::unique_ptr<aio::AioHandle> aio_;
  std::vector<Buffer> buffers_;
  uint64_t clock_ = 0;
};

}  // namespace zt::zero
