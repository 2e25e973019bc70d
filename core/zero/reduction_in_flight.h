#pragma once
// zt::zero::ReductionInFlight: one gradient reduction started over the ranks, whatever its
// transport (flat collectives in grad_reduction.cpp, two levels in hierarchical_reduce.h, int8
// all-to-alls in quantized_reduce.h). A bucket's gradient part (grad_reduction.h) holds one from
// start_grad_sync to finish_grad_sync.

#include <ATen/core/Tensor.h>

#include "core/zero/wait_clock.h"

namespace zt::zero {

class ReductionInFlight {
 public:
  virtual ~ReductionInFlight() = default;
  // Waits for the reduction and returns its result: the input itself (an all-reduce summed in
  // place), the output the transport was offered, or a tensor of its own.
  virtual at::Tensor finish(WaitClock& clock) = 0;
};

}  // namespace zt::zero
