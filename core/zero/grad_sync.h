#pragma once
// Gradient synchronisation: gradients leave autograd through post-accumulate-grad hooks into the
// buckets' accumulation buffers, and each bucket's reduction starts as soon as its last parameter's
// gradient arrived, so communication overlaps the rest of backward.
//
//   stages 2-3: every micro-step reduce-scatters each bucket (the full gradient is transient)
//   stages 0-1: gradients accumulate over the window; the boundary micro-step reduces
//
// At most max_inflight reductions are outstanding (each holds a transient staging buffer at
// stages 2-3); the oldest is finished before another starts. Buckets some of whose parameters got
// no gradient this micro-step are reduced at the end of backward in bucket order, so every rank
// issues the same collectives in the same order, whichever parameters its graph touched.

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
  // reduction starts (stage 3 frees the bucket's full parameters there).
  GradSync(std::vector<std::unique_ptr<Bucket>>& buckets, dist::Communicator& comm,
           WaitClock& clock, int max_inflight, std::function<void(size_t)> on_complete);
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

  std::vector<std::unique_ptr<Bucket>>& buckets_;
  dist::Communicator& comm_;
  WaitClock& clock_;
  size_t max_inflight_;
  std::function<void(size_t)> on_complete_;
  bool reduce_ = false;
  std::deque<size_t> inflight_;  // buckets with a reduction in flight, oldest first
};

}  // namespace zt::zero
