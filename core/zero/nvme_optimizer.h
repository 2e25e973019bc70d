#pragma once
// NvmeOptimizerSwapper: the master and optimizer state of this rank's stepped ranges on NVMe
// (ZeRO-Infinity's optimizer offload; DeepSpeed's PipelinedOptimizerSwapper in
// deepspeed/runtime/swap_tensor/pipelined_optimizer_swapper.py). Layout on disk, one file per
// rank, flat buffer ("slot") and chunk of sub_group_size elements:
//
//   <nvme_path>/zerotorch_optimizer_rank<r>_pid<p>/buffer<b>_chunk<c>.swp
//     [ master (n,) | pad to 4 KiB | state 0 (n,) | pad | state 1 (n,) | pad | gradient (n,) | pad
//     ]
//
// in the master's dtype and the state's (fp32, or bf16 with DeepSpeed's bf16 master / state keys).
// The gradient region exists where the swapper is also the gradients' spill (grad_spill.h, a
// grad_dtype given): backward writes each bucket's reduced slice there, the step reads it with the
// chunk, and a chunk's write-back stops before it.
//
// A swap buffer (aio::AlignedBuffer) holds one chunk in exactly that layout, so a chunk moves in
// one transfer each way, through O_DIRECT. At a step, chunks stream through buffer_count buffers
// (chunk i uses buffer i % buffer_count):
//
//   aio read   [c1][c2]      [c3]            pipeline_read: read-ahead of max(1, count - 2) chunks
//   host step      [ c0  ][ c1  ][ c2  ]     the optimizer on the chunk's views
//   aio write             [c0]  [c1]  [c2]   pipeline_write: waited only when the buffer is reused
//
// Without pipeline_read a chunk is read when its turn comes; without pipeline_write each write is
// waited at once; the numbers are the same either way. The files are scratch space for this run:
// the destructor removes them (checkpoints are written separately).
//
// Memory: buffer_count * chunk bytes in RAM (chunk bytes = (master + states * state [+ gradient])
// bytes per element times sub_group_size, each region page-rounded) instead of that many bytes per
// stepped element, plus the gradient spill's two staging buffers.

#include <cstdint>
#include <functional>
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
#include "core/zero/grad_spill.h"
#include "core/zero/master_chunk.h"

namespace zt::zero {

class NvmeOptimizerSwapper final : public GradSpill {
 public:
  // One chunk of one slot: views into a swap buffer, valid inside the callback only.
  using Chunk = MasterChunk;
  using ChunkFn = std::function<void(Chunk&)>;

  // options: zero_optimization.offload_optimizer (nvme_path, buffer_count, pipeline_read/write);
  // chunks of sub_group_size elements. slot_numels: elements of each slot's stepped range. Checks
  // options.nvme_path before anything is
  // written: it must be a writable directory whose filesystem has room for this rank's files
  // (times LOCAL_WORLD_SIZE, the ranks that share it); errors name the path and the bytes.
  // grad_dtype: the gradients' dtype where the files hold them too (GradSpill), else Undefined.
  NvmeOptimizerSwapper(const OffloadConfig& options, int64_t sub_group_size,
                       const aio::AioOptions& aio, int rank,
                       const std::vector<int64_t>& slot_numels,
                       std::vector<std::string> state_names,
                       at::ScalarType master_dtype = at::kFloat,
                       at::ScalarType state_dtype = at::kFloat,
                       at::ScalarType grad_dtype = at::ScalarType::Undefined);
  ~NvmeOptimizerSwapper() override;
  NvmeOptimizerSwapper(const NvmeOptimizerSwapper&) = delete;
  NvmeOptimizerSwapper& operator=(const NvmeOptimizerSwapper&) = delete;

  // Streams the chunks of `slots`, in order, through the swap buffers: each chunk is read from
  // its file (unless read is false: then the buffer's previous contents are there, and fn must
  // set every element), fn runs on it, and it is written back when write_back. with_grads: the
  // chunk's gradient region is read too (Chunk::grad). Throws the first I/O error (file and
  // offset named) after the transfers in flight ended.
  void for_each_chunk(const std::vector<size_t>& slots, const ChunkFn& fn, bool read,
                      bool write_back, bool with_grads = false);

  // GradSpill: a slot's gradient in its chunks' gradient regions, through the staging buffers.
  void write(size_t slot, const at::Tensor& grad) override;
  void read(size_t slot, const at::Tensor& into) override;
  bool holds_grads() const { return grad_dtype_ != at::ScalarType::Undefined; }

  // Slot `slot`'s chunk files, in order: each holds `numel` values at offsets[0] (master, in
  // master_dtype) and offsets[1 + i] (state i, in state_dtype), as written by the last
  // for_each_chunk.
  struct ChunkLocation {
    std::string path;
    int64_t begin = 0, numel = 0;
    std::vector<int64_t> offsets;
  };
  std::vector<ChunkLocation> chunk_files(size_t slot) const;
  // gate(slot) runs before each write-back of a chunk of `slot` starts (null: none).
  void set_write_gate(std::function<void(size_t slot)> gate) { write_gate_ = std::move(gate); }

  const std::vector<std::string>& state_names() const { return state_names_; }
  int64_t nvme_bytes() const;    // bytes of this rank's files
  int64_t buffer_bytes() const;  // host bytes of the swap and gradient staging buffers
  const std::string& directory() const { return dir_->path(); }
  // Bytes a chunk of numel elements takes in its file (and in a swap buffer); grad_element_bytes
  // 0: no gradient region.
  static int64_t chunk_bytes(int64_t numel, int64_t states, int64_t master_element_bytes = 4,
                             int64_t state_element_bytes = 4, int64_t grad_element_bytes = 0);
  // Host bytes of a spill's staging buffers for chunks of at most `largest_chunk` elements.
  static int64_t grad_staging_bytes(int64_t largest_chunk, int64_t grad_element_bytes);
  at::ScalarType master_dtype() const { return master_dtype_; }
  at::ScalarType state_dtype() const { return state_dtype_; }

 private:
  struct ChunkFile {
    size_t slot;
    int64_t begin;
    int64_t numel;
    std::unique_ptr<aio::AioFile> file;
  };
  void open_files_and_buffers(int64_t largest);
  Chunk views(const ChunkFile& c, const aio::AlignedBuffer& buf) const;
  int64_t bytes_of(int64_t numel) const;       // chunk_bytes with this swapper's dtypes
  int64_t master_offset(int64_t numel) const;  // after a chunk's gradient region, if any
  // Streams slot's gradient pieces between `t` and the files (write: t -> files).
  void move_grads(size_t slot, const at::Tensor& t, bool write);

  OffloadConfig options_;
  int64_t sub_group_size_;
  aio::AioOptions aio_options_;
  int rank_;
  std::vector<std::string> state_names_;
  at::ScalarType master_dtype_, state_dtype_, grad_dtype_;
  std::unique_ptr<aio::SwapDirectory> dir_;
  std::vector<std::vector<size_t>> chunks_of_slot_;  // slot -> indices into chunks_
  std::vector<ChunkFile> chunks_;
  std::unique_ptr<aio::AioHandle> aio_;
  std::vector<aio::AlignedBuffer> buffers_;
  std::vector<aio::AioHandle::Ticket> buffer_writes_;  // per buffer: its last write in flight
  std::vector<aio::AlignedBuffer> grad_staging_;       // GradSpill's two staging buffers
  std::function<void(size_t)> write_gate_;
};

}  // namespace zt::zero
