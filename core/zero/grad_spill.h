#pragma once
// GradSpill: where a bucket's reduced gradient slice waits, between the micro-steps of a window
// and until the step, when host memory is not to hold it. The one kind is the gradient region of
// the optimizer's NVMe chunk files (core/zero/nvme_optimizer.h), chosen with offload_optimizer
// nvme for a model whose gradients live in host memory (core/engine_setup.cpp): the step then
// reads each chunk's gradient in the same transfer as its master and moments, as DeepSpeed's
// stage 3 swaps its gradient partitions into the optimizer's swap files.
//
// Host memory then holds a bucket's slice only from its reduction to its write (the gradient
// reductions in flight bound it, communication.max_inflight_reductions) and the spill's two
// staging buffers (kGradSpillPiece bytes each).

#include <cstddef>
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace zt::zero {

// Bytes of one staging buffer a gradient slice streams through to and from its files.
inline constexpr int64_t kGradSpillPiece = int64_t{16} << 20;

class GradSpill {
 public:
  virtual ~GradSpill() = default;
  // Stores slot `slot`'s whole reduced gradient ((stepped,), the accumulation dtype), replacing
  // what was stored. Returns once every byte is written; throws the file and offset on an error.
  virtual void write(size_t slot, const at::Tensor& grad) = 0;
  // Reads slot `slot`'s stored gradient into `into` ((stepped,), the accumulation dtype).
  virtual void read(size_t slot, const at::Tensor& into) = 0;
};

}  // namespace zt::zero
