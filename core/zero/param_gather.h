#pragma once
// Stage-3 parameter gathering: only shards are resident; a unit's full parameters exist from just
// before its forward (or backward) until just after it, or until its backward where it is kept.
//
//   forward   gather unit i (wait) | prefetch units i+1.. | run unit i | release unit i (unless
//             kept for its backward)
//   backward  (hook on unit i's output) gather unit i (wait) | prefetch units i-1.. | unit i's
//             backward | release each bucket as its last gradient arrives (GradSync)
//
// A unit whose backward comes within stage3_max_reuse_distance elements of gathering after its
// forward is not released there but kept for its backward (kept_for_backward below); backward's
// gather of it is then a no-op.
//
// Prefetch starts the all-gathers of the following units, up to stage3_prefetch_bucket_size
// elements, so they overlap the current unit's compute. The root unit (parameters outside every
// declared unit) is gathered by the engine for the whole of forward and backward. A gathered
// scope (Engine::GatheredParameters) keeps everything gathered until it ends. Below stage 3
// every call is a no-op: the full parameters are always resident.
//
// A routed unit (call_unit.h: a layer's experts) is never prefetched (a shard on NVMe is still
// read ahead): it is gathered once its routing is known, and then only the experts some rank of the
// group routed rows to (the others are neither sent nor received; their range of the full buffer is
// left as it is), again for its backward.
//
// A unit's frozen buckets (unit_buckets.h) are gathered and released with it. In backward they get
// no gradient to say when they are done, so they are released when backward reaches an earlier unit
// (its output's gradient hook fires once every use of that output, the later units included, has
// run its backward), or at the end of backward.

#include <memory>
#include <vector>

#include "core/zero/bucket.h"
#include "core/zero/units.h"
#include "core/zero/wait_clock.h"
#include "parallel/communicator.h"

namespace zt::zero {

class ParamGather {
 public:
  // secondary: the hpZ group (zero_hpz_partition_size), or null. frozen: the frozen buckets
  // (unit_buckets.h: make_frozen_buckets), indexed by Unit::frozen_buckets.
  ParamGather(UnitPlan& plan, std::vector<std::unique_ptr<Bucket>>& buckets,
              std::vector<std::unique_ptr<Bucket>>& frozen, dist::Communicator& comm,
              dist::Communicator* secondary, WaitClock& clock, bool active, int64_t prefetch_numel,
              int64_t max_reuse_distance);
  // Unregisters the unit hooks.
  ~ParamGather();
  ParamGather(const ParamGather&) = delete;
  ParamGather& operator=(const ParamGather&) = delete;

  bool active() const { return active_; }
  size_t root() const { return plan_.units.size() - 1; }

  void gather_unit(size_t unit, bool wait);
  // A routed unit (call_unit.h): rows (E,), the rows each expert takes on this rank. Returns, for
  // each expert, whether any rank of the group routed rows to it (one all-reduce of E counts).
  std::vector<bool> routed_anywhere(size_t unit, const at::Tensor& rows);
  // Gathers the unit's experts that `routed` marks (every parameter's first dimension), and only
  // those where the bucket's gather allows it (Bucket::start_param_gather); all of them when all
  // are marked or the group is one rank.
  void gather_routed(size_t unit, const std::vector<bool>& routed, bool wait);
  // Starts gathering the units after (direction +1, forward) or before (-1, backward) `unit`, up
  // to the prefetch budget. The root unit is never prefetched.
  void prefetch_after(size_t unit, int direction);
  void release_unit(size_t unit);
  // Whether unit's parameters stay gathered from its forward to its backward.
  bool kept_for_backward(size_t unit) const { return kept_[unit]; }
  void release_bucket(size_t bucket);
  // Backward has reached `unit`: the frozen buckets of the declared units after it are released.
  void release_frozen_after(size_t unit);
  void gather_all();
  void release_all();

  // Gathered scopes (GatheredParameters): while one is open nothing is released.
  void open_scope();
  // Returns true when the last scope closed.
  bool close_scope();
  bool in_scope() const { return scopes_ > 0; }

  // Set by the engine around loss.backward().
  void set_in_backward(bool on) { in_backward_ = on; }
  bool in_backward() const { return in_backward_; }

  int64_t gathered_bytes() const { return gathered_bytes_; }
  // Since construction: bytes of parameters rebuilt by gathers, and bytes of routed units'
  // experts left out because no rank routed to them.
  struct Traffic {
    int64_t gathered_bytes = 0;
    int64_t unrouted_bytes = 0;
  };
  const Traffic& traffic() const { return traffic_; }
  int64_t peak_gathered_bytes() const { return peak_gathered_bytes_; }

 private:
  class Hooks;
  void gather(Bucket& bucket, bool wait);
  void release(Bucket& bucket);
  // Every bucket of unit u, trainable then frozen.
  std::vector<Bucket*> unit_buckets(size_t u) const;

  UnitPlan& plan_;
  std::vector<std::unique_ptr<Bucket>>& buckets_;
  std::vector<std::unique_ptr<Bucket>>& frozen_;
  dist::Communicator& comm_;
  dist::Communicator* secondary_;
  WaitClock& clock_;
  bool active_;
  int64_t prefetch_numel_;
  std::vector<bool> kept_;  // per unit: kept_for_backward
  int scopes_ = 0;
  bool in_backward_ = false;
  int64_t gathered_bytes_ = 0;
  int64_t peak_gathered_bytes_ = 0;
  Traffic traffic_;
};

}  // namespace zt::zero
