#pragma once
// Gradient synchronisation: gradients leave autograd through post-accumulate-grad hooks into the
// buckets' accumulation buffers, and each bucket's reduction starts as soon as its last parameter's
// gradient arrived, so communication overlaps the rest of backward.
//
//   stages 2-3: every micro-step reduce-scatters each bucket (the full gradient is transient)
//   stages 0-1: gradients accumulate over the window; the boundary micro-step reduces
//
// At most max_inflight reductions are outstanding (each holds a transient staging buffer at
// stages 2-3); the oldest is finished before another starts.
//
// Every rank must issue the same collectives in the same order, whichever parameters its graph
// touched (a rank whose batch skips a branch completes a bucket late, or only at the end of
// backward). So reductions start in one launch order shared by all ranks, as DDP's reducer does:
// a completed bucket waits until every bucket before it in that order has started; buckets left
// incomplete start at the end of backward. The order begins as a guess (the declared units last to
// first, then the root unit's buckets, which hold the embeddings that backward reaches last) and,
// after the first backward, becomes the order in which rank 0's buckets completed, broadcast
// once, so reductions follow backward from then on. A guess that put a bucket completing at the
// end of backward first would hold every bucket's staging buffer (the whole gradient) through the
// first backward.

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/zero/bucket.h"
#include "core/zero/wait_clock.h"
#include "parallel/communicator.h"

namespace zt::zero {

class GradSync {
 public:
  // on_complete(b) runs when bucket b has every gradient of this micro-step, before its
  // reduction starts (stage 3 frees the bucket's full parameters there); on_reduced(b) when its
  // reduction was waited for (the reduced gradient is in the bucket, as far as the host can tell:
  // on an accelerator, ordered before what the current stream runs next). root_unit: the root
  // unit's index (core/zero/units.h: the last).
  GradSync(std::vector<std::unique_ptr<Bucket>>& buckets, dist::Communicator& comm,
           WaitClock& clock, int64_t max_inflight, std::function<void(size_t)> on_complete,
           std::function<void(size_t)> on_reduced, size_t root_unit);
  // Removes the hooks from the parameters.
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Call before each backward: whether completed buckets reduce during this backward.
  void begin_backward(bool reduce);
  // After backward: reduces what is left, waits for every reduction, rearms the buckets.
  void finish_backward();

 private:
  class Hook;
  void on_grad_ready(size_t bucket, size_t entry, const at::Tensor& param);
  void on_bucket_complete(size_t bucket);
  // Starts the reductions of the completed buckets whose turn it is in order_.
  void launch_ready();
  // Waits for bucket b's reduction, then runs on_reduced(b).
  void finish_reduction(size_t b);
  // After the first backward: order_ becomes rank 0's completion order.
  void learn_order();

  std::vector<std::unique_ptr<Bucket>>& buckets_;
  dist::Communicator& comm_;
  WaitClock& clock_;
  size_t max_inflight_;
  std::function<void(size_t)> on_complete_;
  std::function<void(size_t)> on_reduced_;
  bool reduce_ = false;
  std::deque<size_t> inflight_;  // buckets with a reduction in flight, oldest first
  std::vector<size_t> order_;    // launch order, the same on every rank
  bool order_learned_ = false;
  std::vector<size_t> completed_;  // this micro-step's buckets in completion order
  std::vector<bool> ready_;        // completed this micro-step, by bucket
  size_t next_ = 0;                // position in order_ of the next reduction to start
};

}  // namespace zt::zero
