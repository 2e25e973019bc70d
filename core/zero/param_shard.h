#pragma once
// zt::zero::ParamShard: where a released stage-3 bucket keeps this rank's slice of its parameters
// between uses, one kind per bucket, chosen by plan_bucket (core/zero/bucket_plan.h):
//
// clang-format off
//   kind            lives                                          options
//   MemoryShard     on the parameters' device, or in host memory   (default); offload_param cpu,
//                   (page-locked for a GPU model: pinned_host.h)   pin_memory
//   NvmeShard       in a slot of the NVMe parameter swapper        offload_param nvme
//                   (nvme_params.h)
//   QuantizedShard  int8 blocks and fp32 scales (block_quant.h);   zero_quantized_nontrainable_weights,
//                   gathers move the blocks themselves             frozen buffers
// clang-format on

#include <cstdint>
#include <memory>

#include <ATen/core/Tensor.h>

#include "core/zero/wait_clock.h"
#include "parallel/communicator.h"

namespace zt::zero {

class NvmeParamSwapper;

// What one rank sends in a parameter all-gather: values, or int8 blocks and their scales.
struct GatherPart {
  at::Tensor data;
  at::Tensor scales;
};

class ParamShard {
 public:
  virtual ~ParamShard() = default;
  // `own` (this rank's slice of the full buffer) becomes the shard's values.
  virtual void keep(const at::Tensor& own) = 0;
  // The shard's values for the optimizer or a checkpoint load to read and write, until checkin.
  // read false: only the padding past the last parameter is set; the caller writes the rest.
  // written: the values changed.
  virtual at::Tensor checkout(bool read) = 0;
  virtual void checkin(bool written) { (void)written; }
  // Copies the shard's values into `own` (a slice of the full buffer, maybe on another device).
  virtual void load_into(const at::Tensor& own, bool non_blocking) = 0;
  // The tensor in memory the shard is, where it is one (a MemoryShard's).
  virtual at::Tensor resident() const { return at::Tensor(); }
  // A QuantizedShard's stored blocks, which its gathers send as they are.
  virtual GatherPart stored() const { return GatherPart(); }
  // A QuantizedShard: the whole buffer's stored values rebuilt in fp32, gathered over `comm`
  // (the values a checkpoint saves, so a load quantizes them back bit for bit). Others: undefined.
  virtual at::Tensor stored_values(dist::Communicator& comm, WaitClock& clock) {
    (void)comm;
    (void)clock;
    return at::Tensor();
  }
  virtual int64_t bytes() const = 0;
  // The shard in `dtype` (16-bit compute); a shard outside memory keeps its dtype.
  virtual void cast(at::ScalarType dtype) { (void)dtype; }
  // Starts reading the shard ahead of its gather where that takes time.
  virtual void prefetch() {}
  virtual bool on_nvme() const { return false; }
};

// Where a MemoryShard of parameters on `device` lives: that device, or host memory (`host`),
// page-locked for a GPU model when `pin`.
struct ShardPlacement {
  c10::Device device = c10::Device(c10::kCPU);
  bool host = false;
  bool pin = false;
};

// Holds `adopted` (partitioned construction) or, when undefined, the first values kept.
std::unique_ptr<ParamShard> make_memory_shard(const ShardPlacement& where, at::Tensor adopted);
// `world` shards of `shard_numel` elements make the bucket's full buffer.
std::unique_ptr<ParamShard> make_quantized_shard(const ShardPlacement& where, int64_t shard_numel,
                                                 int64_t world);
// `from`'s values move to `slot` of `swapper` (written there now). pad_begin: where the padding
// past the last parameter starts inside the shard.
std::unique_ptr<ParamShard> move_to_nvme(ParamShard& from, NvmeParamSwapper* swapper, size_t slot,
                                         int64_t pad_begin);

}  // namespace zt::zero
