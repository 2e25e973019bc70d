#pragma once
// What the sharded step (core/zero/sharded_step.h) hands the optimizer, and the norm it clips by:
// a part chosen once from the optimizer (make_step_gradients), so the step itself has no branch
// per optimizer.
//
//   owned gradients (every elementwise optimizer): the reduced owned gradient as it is; the norm
//     is the raw sum of squares times |inv|, and the optimizer multiplies inv in with the clip
//   Muon (core/zero/muon_gradients.h): a new buffer per bucket, the gradient times inv with the
//     momentum folded in and every Muon matrix orthogonalised; the norm is over that buffer, and
//     the optimizer multiplies the clip alone
//
// inv = post_reduce_scale / loss_scale throughout.

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/engine_options.h"
#include "core/zero/bucket.h"
#include "core/zero/wait_clock.h"
#include "optim/shard_optimizer.h"
#include "parallel/communicator.h"

namespace zt::zero {

class StepGradients {
 public:
  virtual ~StepGradients() = default;
  // Whether norm() needs the global sum of squares of the raw owned gradients.
  virtual bool norm_needs_raw_sum() const = 0;
  // Makes this step's gradients for the buckets in `stepped` and returns their global norm
  // (raw_sq: the raw sum of squares when norm_needs_raw_sum(), else unused).
  virtual double prepare(const std::vector<size_t>& stepped, double inv, double raw_sq) = 0;
  // The gradient bucket b steps with (after prepare).
  virtual at::Tensor gradient(size_t b) const = 0;
  // Whether gradient(b) is already the one bucket b steps with as soon as its reduction of the
  // step's last micro-batch ended (before prepare): true for the owned gradient as it is.
  virtual bool final_at_reduction() const = 0;
  // The factor of the gradient the optimizer multiplies in, before the clipping factor.
  virtual double factor(double inv) const = 0;
  // Bucket b's group ranges as the optimizer steps them (Muon cuts them at its matrices' edges).
  virtual std::vector<optim::GroupRange> ranges(size_t b,
                                                std::vector<optim::GroupRange> groups) const {
    (void)b;
    return groups;
  }
  // After the step: lets go of what prepare made.
  virtual void release() {}
};

// The part for `spec` (the optimizer as resolved for the master's device). optimizer_of(b) is
// bucket b's optimizer; state_device is where the optimizer state lives; comm the ranks the
// state is sharded over.
std::unique_ptr<StepGradients> make_step_gradients(
    const optim::OptimizerSpec& spec, const EngineOptions& options,
    std::vector<std::unique_ptr<Bucket>>& buckets, dist::Communicator& comm, WaitClock& clock,
    std::function<optim::ShardOptimizer&(size_t)> optimizer_of, c10::Device state_device);

}  // namespace zt::zero
