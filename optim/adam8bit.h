#pragma once
// Adam8bit: Adam/AdamW whose two moments are stored block-wise quantized to 8 bits
// (blockwise_quant.h): m with the signed dynamic map, v with the unsigned one, one fp32 absmax
// per block for each. Each step runs one pass per block: dequantize m and v, update them and the
// parameter in fp32, find the block's new absmax, requantize (adam8bit_kernel.h: scalar, AVX2 and
// AVX-512 builds, bit for bit the same; blocks spread over the intra-op threads). So the state is
// 2 bytes per parameter + 8 bytes per block (2.004 bytes/param at block 2048), against 8 for Adam.
//
// Shards with fewer than OptimizerSpec::min_8bit_size elements keep fp32 state (the paper's rule
// for small tensors, here applied to the shard: a flat shard does not know its tensors).
//
// State (blocks of block_size elements laid out like master; the last block may be short):
//   "exp_avg_code" uint8 [N], "exp_avg_absmax" fp32 [ceil(N / block)],
//   "exp_avg_sq_code" uint8 [N], "exp_avg_sq_absmax" fp32 [ceil(N / block)],
//   "block_size" int64 0-d;  or, for small shards, "exp_avg" and "exp_avg_sq" fp32 [N].
// On a GPU (master on CUDA) the state lives on the device and the step is the CUDA plugin's
// kernel (optim/adam8bit.cu; block_size <= kAdam8bitMaxCudaBlock), with the same arithmetic and
// codes as the CPU pass: adam_formula.h's unfused update on both sides.
// The codes depend on block boundaries, so resharding this state at another world size needs a
// dequantize (dequantized_state()) and a requantize, not a plain slice.

#include <optional>

#include <c10/core/Event.h>

#include "optim/adam8bit_launch.h"
#include "optim/blockwise_quant.h"
#include "optim/cpu_adam.h"
#include "optim/shard_optimizer.h"

namespace zt::optim {

// The groups of one step, built on the host (tests run it anywhere): the non-empty groups sorted
// by begin, constants from adam_constants() of step t. The CPU pass and the kernel both read them.
std::vector<Adam8bitGroup> adam8bit_groups(const std::vector<GroupRange>& groups, bool adamw_mode,
                                           int64_t t);

class Adam8bit : public ShardOptimizer {
 public:
  explicit Adam8bit(const OptimizerSpec& spec);

  void step(at::Tensor& master, const at::Tensor& grad, const std::vector<GroupRange>& groups,
            at::Tensor* half_out = nullptr) override;
  void init(int64_t numel, const at::TensorOptions& options) override;
  int64_t state_bytes() const override;
  std::map<std::string, at::Tensor> state_dict() const override;
  void load_state_dict(const std::map<std::string, at::Tensor>& state) override;
  std::string name() const override { return "Adam8bit"; }

  bool quantized() const { return m_code_.defined(); }
  // The CPU pass's build (OptimizerSpec::simd, as CpuAdam: auto picks the widest this CPU runs).
  SimdPath simd_path() const { return path_; }
  // m and v as fp32 [N] (dequantized when quantized): for tests and resharding.
  std::pair<at::Tensor, at::Tensor> dequantized_state() const;

 private:
  void step_cuda(at::Tensor& master, const at::Tensor& grad,
                 const std::vector<Adam8bitGroup>& groups, at::Tensor* half_out);
  at::Tensor codebook(const c10::Device& device);

  void* cuda_launcher_;  // Adam8bitLauncher, looked up at the first GPU step when null
  bool adamw_mode_;
  int64_t block_;
  int64_t min_8bit_size_;
  QuantCodec signed_codec_;
  QuantCodec unsigned_codec_;
  at::Tensor m_code_, m_absmax_, v_code_, v_absmax_;  // quantized state
  at::Tensor m32_, v32_;                              // small-shard fp32 state
  at::Tensor codebook_;                               // GPU only: maps and midpoints
  // GPU only: the step's group table (its lr and bias corrections change every step), staged in
  // page-locked host memory and copied into a device buffer, both reused across steps; the event
  // marks when the last copy left the host buffer, so the next step may overwrite it.
  at::Tensor groups_host_, groups_device_;
  std::optional<c10::Event> groups_copied_;
  SimdPath path_;
  void (*block_kernel_)(const kernels::Adam8bitBlock&) = nullptr;
};

}  // namespace zt::optim
