#pragma once
// zt::zero::GradReduction: where one bucket's gradients accumulate and how they are reduced, one
// kind per bucket, chosen by plan_bucket (core/zero/bucket_plan.h):
//
// clang-format off
//   kind            accumulates                        reduces                  owned() after the sync
//   WindowGrads     the window's full buffer           on the window's          stage 0: the full buffer,
//                   (padded,) A, over micro-steps      boundary                 all-reduced; stage 1: the
//                                                                               reduced slice (shard,) A
//   MicroStepGrads  a staging buffer (padded,) A per   every micro-step, into   the slice summed over the
//                   micro-step (freed once reduced)    the slice (shard,) A     window's micro-steps
// clang-format on
//
// (A: the accumulation dtype.) The transport is the other choice made once: flat collectives over
// every rank of the group, two levels over the nodes (hierarchical_reduce.h) or ZeRO++'s int8
// all-to-alls (quantized_reduce.h), each started by a StartReduction.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include <ATen/core/Tensor.h>

#include "core/zero/flat_buffer.h"
#include "core/zero/grad_spill.h"
#include "core/zero/reduction_in_flight.h"
#include "core/zero/wait_clock.h"
#include "parallel/communicator.h"

namespace zt::zero {

// Starts the sum over the ranks of `in` ((padded,), the communication dtype): of the whole tensor
// (an all-reduce, in place) or of this rank's slice (a reduce-scatter; into `out` where it is
// defined and the transport writes a caller's buffer).
using StartReduction = std::function<std::unique_ptr<ReductionInFlight>(
    dist::Communicator& comm, const at::Tensor& in, const at::Tensor& out)>;

class GradReduction {
 public:
  virtual ~GradReduction() = default;
  // Adds one parameter's flattened gradient at `range` of the padded buffer.
  virtual void add(dist::Range range, const at::Tensor& grad) = 0;
  virtual void start(dist::Communicator& comm) = 0;
  // No-op when no reduction is in flight.
  virtual void finish(WaitClock& clock) = 0;
  // The reduced gradient of the stepped range; undefined before the window's first sync where
  // the kind keeps only reduced slices.
  virtual at::Tensor owned() const = 0;
  // Drops the window's gradients.
  virtual void zero() = 0;
  virtual int64_t bytes() const = 0;  // in memory

  // Stages 2-3, a model whose gradients live in host memory: from now on the reduced slice waits
  // in `spill` as slot `slot` (grad_spill.h), written after each reduction (and read back to add
  // the next micro-step's), and owned() is undefined.
  virtual void spill_to(GradSpill* spill, size_t slot);
  // The window has a reduced gradient (in memory or spilled).
  virtual bool has_grad() const { return owned().defined(); }
  // Spilled: the sum of squares of the stored gradient, as grad_sum_of_squares took it when it
  // was written; nullopt otherwise.
  virtual std::optional<double> spilled_sum_of_squares() const { return std::nullopt; }
  // owned(), or where it is spilled, a copy read back (an error path's look at the values).
  virtual at::Tensor load_owned() const { return owned(); }
};

// A host gradient's sum of squares in float64, as the step's norm takes it on the CPU
// (core/zero/sharded_step.cpp): fp32 in one multi-threaded float64 pass, another dtype as its
// fp32 norm, squared.
double grad_sum_of_squares(const at::Tensor& g);

struct GradReductionSpec {
  at::TensorOptions grad;         // the accumulation buffers' dtype and device
  at::ScalarType comm_dtype;      // the communication dtype
  double pre_reduce_scale = 1.0;  // applied to the input just before it is reduced
  int64_t padded = 0, shard = 0;  // the layout's padded and per-rank sizes
  StartReduction transport;
};

// Stage 0 (all_reduce true) or stage 1: the window's full buffer, reduced on the boundary.
std::unique_ptr<GradReduction> make_window_grads(const GradReductionSpec& spec, bool all_reduce);
// Stages 2-3. release_shard: the slice holds bytes only from the first reduction of a window to
// zero() (a CPU model's memory peak; BucketOptions::release_grad_shard).
std::unique_ptr<GradReduction> make_micro_step_grads(const GradReductionSpec& spec,
                                                     bool release_shard);

// The transports.
StartReduction flat_all_reduce();
StartReduction flat_reduce_scatter(int64_t shard);

}  // namespace zt::zero
