#pragma once
// MasterStore: where the master of each flat buffer's stepped range ("slot") and the
// optimizer state laid out like it live, behind one interface that the step
// (core/zero/sharded_step.h) and checkpoints (core/checkpoint/checkpoint.cpp) iterate chunk by
// chunk, whatever the placement:
//
//   placement (EngineOptions)      store             a chunk is            optimizer state
//   ----------------------------   ---------------   -------------------   -------------------
//   no offload_optimizer           ResidentMasters   the whole slot, on    held by the
//   offload_optimizer cpu                            the model's device    optimizer itself
//                                                    or in host memory     (bf16 master: the
//                                                                          store, beside it)
//   offload_optimizer nvme         NvmeMasters       sub_group_size        in the chunk, read
//                                                    elements in a swap    from and written
//                                                    buffer                back to its file
//
// The master is fp32, or bf16 with bf16.bf16_master_weights_and_grads (EngineOptions::
// master_dtype); state the store holds is in EngineOptions::optimizer_state_dtype. A resident
// master is a separate copy unless the parameters (or the stage-3 shard) have the master's dtype
// and live where the optimizer steps: then the chunk's master is a view of them, and writing it
// changes the parameters. With the model on a GPU, a host master is page-locked (pinned_host.h) so
// the step's copies can be asynchronous (core/zero/host_offload.h).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "core/engine_options.h"
#include "core/zero/bucket.h"
#include "core/zero/grad_spill.h"
#include "core/zero/master_chunk.h"

namespace zt::zero {

class MasterStore {
 public:
  using ChunkFn = std::function<void(MasterChunk&)>;
  virtual ~MasterStore() = default;

  // Takes every slot's master from the current parameter values (and zero store-held state, as a
  // fresh optimizer has it). Call once, after every rank holds the same parameters and before
  // they are cast to the compute dtype.
  virtual void init() = 0;
  // Visits the chunks of `slots`, in order. read: the chunk holds the stored values (false: fn
  // sets every element of master and states); write_back: what fn wrote is kept. A resident
  // store's memory is the storage itself, so for it both flags change nothing. with_grads: each
  // chunk brings its slot's reduced gradient (MasterChunk::grad), where the store is the
  // gradients' spill (grad_spill()).
  virtual void for_each_chunk(const std::vector<size_t>& slots, const ChunkFn& fn, bool read,
                              bool write_back, bool with_grads = false) = 0;
  // Where the buckets' reduced gradients wait until the step (the NVMe chunk files), or null
  // when they stay in memory.
  virtual GradSpill* grad_spill() { return nullptr; }
  // Where the master lives and the optimizer steps it.
  virtual c10::Device device() const = 0;
  // Names of the state tensors the store holds (CPUAdam's exp_avg, exp_avg_sq on NVMe); empty
  // when the optimizer holds its state.
  virtual const std::vector<std::string>& state_names() const = 0;
  // Slot b's whole master as one tensor (a separate master, or a view of the fp32 parameters), or
  // undefined when the store streams it from files.
  virtual at::Tensor resident(size_t b) const = 0;
  // The directory of the store's swap files, empty when it keeps everything in memory.
  virtual std::string swap_directory() const { return ""; }

  // A store that streams from files: where slot b's chunks are, in order, for a reader outside
  // the store (a background checkpoint write, core/checkpoint/async_checkpoint.h). Each chunk's
  // file holds `numel` values at offsets[0] (the master, in master_dtype()) and at
  // offsets[1 + i] (state i, in state_dtype()). The files hold every value written once
  // for_each_chunk has returned. Empty in memory.
  struct FileChunk {
    std::string path;
    int64_t begin = 0, numel = 0;
    std::vector<int64_t> offsets;
  };
  at::ScalarType master_dtype() const { return master_dtype_; }
  at::ScalarType state_dtype() const { return state_dtype_; }
  virtual std::vector<FileChunk> file_chunks(size_t /*b*/) const { return {}; }
  // Runs on the calling thread before a chunk of `slot` is written back to its file, so that a
  // background reader of the files can hold the writer until it has read that slot. Null: none.
  virtual void set_write_gate(std::function<void(size_t slot)> /*gate*/) {}

  virtual int64_t master_bytes() const = 0;           // separate masters in host or device memory
  virtual int64_t state_bytes() const { return 0; }   // state it holds in host or device memory
  virtual int64_t nvme_bytes() const { return 0; }    // bytes of its swap files
  virtual int64_t buffer_bytes() const { return 0; }  // host buffers the chunks stream through

  // True when state_names() is not empty: the store, not the optimizer, holds the state.
  bool holds_state() const { return !state_names().empty(); }
  std::vector<size_t> all_slots() const;

 protected:
  MasterStore(std::vector<std::unique_ptr<Bucket>>& buckets, const EngineOptions& options)
      : buckets_(buckets),
        master_dtype_(options.master_dtype),
        state_dtype_(options.optimizer_state_dtype) {}
  std::vector<std::unique_ptr<Bucket>>& buckets_;
  at::ScalarType master_dtype_, state_dtype_;
};

// Where the master of a model on param_device lives: in host memory with optimizer offload,
// otherwise on the parameters' device.
c10::Device master_device(const c10::Device& param_device, bool offload_optimizer);

// The store for options' placement (the table above). The NVMe store checks its path and free
// space before anything is written; state_names are the optimizer's state laid out like the
// master, which the store holds (the NVMe store always; a resident one beside a bf16 master,
// empty otherwise). spill_grads: the NVMe store's files hold the reduced gradients too, in the
// buckets' accumulation dtype (grad_spill()).
std::unique_ptr<MasterStore> make_master_store(const EngineOptions& options,
                                               std::vector<std::unique_ptr<Bucket>>& buckets,
                                               int rank, std::vector<std::string> state_names,
                                               bool spill_grads = false);

}  // namespace zt::zero
