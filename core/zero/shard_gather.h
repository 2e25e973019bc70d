#pragma once
// zt::zero::ShardGather: how a released stage-3 bucket's full parameters are rebuilt from the
// ranks' shards, chosen once per bucket by plan_bucket (core/zero/bucket_plan.h): the wire (what
// the all-gather moves) and, with ZeRO++ hpZ, a secondary copy that later gathers read instead.
//
// clang-format off
//   wire           moves                                          options
//   ExactWire      the values, over every rank of the group       (default)
//   TwoLevelWire   the values, across nodes, then in the node     mics_hierarchical_params_gather
//   QuantizedWire  int8 blocks and scales, quantized now          zero_quantized_weights (qwZ)
//   StoredWire     a QuantizedShard's blocks as stored            zero_quantized_nontrainable_weights
// clang-format on
//
// hpZ (zero_hpz_partition_size = h): after a gather from the shards, this rank keeps part
// hpz_rank of the full buffer cut in h (in the form its copy's wire sends), and the gathers that
// follow run over the h-rank group from that copy until the values change (drop_copy).

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/zero/flat_buffer.h"
#include "core/zero/param_shard.h"
#include "core/zero/wait_clock.h"
#include "parallel/communicator.h"
#include "parallel/groups.h"

namespace zt::zero {

class GatherWire {
 public:
  virtual ~GatherWire() = default;
  // Starts the all-gather over `comm` of `part` (this rank's) into `params` ((padded,), storage
  // already there).
  virtual void start(dist::Communicator& comm, const GatherPart& part,
                     const at::Tensor& params) = 0;
  // Waits for it and puts the values in `params`. keep_of > 1: returns part keep_index of the
  // full buffer cut in keep_of, in the form this wire sends (the hpZ copy).
  virtual GatherPart finish(const at::Tensor& params, WaitClock& clock, int keep_of,
                            int keep_index) = 0;
  virtual bool in_flight() const = 0;
  // Whether a shard offloaded from a GPU may go to the device and be sent on a side copy stream
  // (not where the wire quantizes on the compute stream).
  virtual bool side_stream() const { return false; }
  // Moves the values as they are, so any range of them can be sent alone (ExactWire).
  virtual bool exact() const { return false; }
};

std::unique_ptr<GatherWire> exact_wire();
std::unique_ptr<GatherWire> two_level_wire(const dist::NodeGroups& groups);
std::unique_ptr<GatherWire> quantized_wire();
// world: the shards whose blocks make the full buffer (whichever group sends them).
std::unique_ptr<GatherWire> stored_wire(int64_t world);

class ShardGather {
 public:
  // from_copy: the wire of gathers from the hpZ copy; null without hpZ.
  ShardGather(std::unique_ptr<GatherWire> from_shards, std::unique_ptr<GatherWire> from_copy,
              int hpz, int hpz_rank, dist::Range own);
  // Gives `params` (released) its storage and starts rebuilding it: over `copy_group` from the
  // hpZ copy where one is kept and a group is given, else over `comm` from `shard`.
  void start(dist::Communicator& comm, dist::Communicator* copy_group, ParamShard& shard,
             const at::Tensor& params);
  // Rebuilds only `ranges` of `params` (flat coordinates, sorted, disjoint) over `comm`: each
  // rank whose shard holds some of them broadcasts its pieces packed into one buffer (one
  // collective per such rank, each value sent once); this rank's slice is loaded whole.
  // Returns false, starting nothing, where the wire does not send values as they are (qwZ, a
  // quantized shard, the two-level wire) or with hpZ (whose copy is the whole buffer's).
  bool start_ranges(dist::Communicator& comm, ParamShard& shard, const at::Tensor& params,
                    const std::vector<dist::Range>& ranges);
  void finish(const at::Tensor& params, WaitClock& clock);
  bool in_flight() const { return active_ != nullptr || !pieces_.empty(); }
  // The values changed (a step, a load, a write-back): the next gather reads the shards.
  void drop_copy() { copy_ = GatherPart(); }
  int64_t copy_bytes() const;

 private:
  std::unique_ptr<GatherWire> from_shards_, from_copy_;
  int hpz_, hpz_rank_;
  dist::Range own_;
  GatherWire* active_ = nullptr;
  // start_ranges' broadcasts in flight: one per root, its pieces of the ranges packed.
  struct Pieces {
    int root = 0;
    std::vector<dist::Range> ranges;
    at::Tensor packed;
    dist::WorkPtr work;
  };
  std::vector<Pieces> pieces_;
  int own_rank_ = 0;           // this rank in the group start_ranges ran over
  bool on_side_ = false;       // the gather in flight was issued on the side copy stream
  bool reads_shards_ = false;  // the gather in flight reads the shards
  GatherPart copy_;
};

}  // namespace zt::zero
