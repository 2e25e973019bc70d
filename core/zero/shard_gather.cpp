#include "core/zero/shard_gather.h"

#include <map>
#include <mutex>
#include <optional>

#include <ATen/ATen.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "core/zero/block_quant.h"
#include "core/zero/hierarchical_reduce.h"
#include "core/zero/released_storage.h"

namespace zt::zero {
namespace {

// The stream offloaded shards of a GPU model are copied to the device on, one per device.
c10::Stream copy_stream(const c10::Device& device) {
  static std::mutex mutex;
  static std::map<c10::DeviceIndex, c10::Stream> streams;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = streams.find(device.index());
  if (it == streams.end()) {
    const c10::impl::VirtualGuardImpl impl(device.type());
    it = streams.emplace(device.index(), impl.getStreamFromGlobalPool(device)).first;
  }
  return it->second;
}

// `t`'s memory, allocated for another stream, is last used by the current (compute) one: the
// caching allocator must not hand it to that other stream before the compute stream is done.
void used_on_current_stream(const at::Tensor& t) {
  if (t.is_cpu()) return;
  const c10::impl::VirtualGuardImpl impl(t.device().type());
  impl.recordDataPtrOnStream(t.storage().data_ptr(), impl.getStream(t.device()));
}

GatherPart values_part(const at::Tensor& params, int of, int index) {
  if (of <= 1) return GatherPart();
  const int64_t n = params.numel() / of;
  return {params.narrow(0, index * n, n).clone(), at::Tensor()};
}

class ExactWire : public GatherWire {
 public:
  void start(dist::Communicator& comm, const GatherPart& part, const at::Tensor& params) override {
    at::Tensor out = params;  // a handle: the values land in params' storage
    work_ = comm.all_gather(part.data, out);
  }
  GatherPart finish(const at::Tensor& params, WaitClock& clock, int of, int index) override {
    clock.wait(work_);
    work_.reset();
    return values_part(params, of, index);
  }
  bool in_flight() const override { return work_ != nullptr; }
  bool side_stream() const override { return true; }
  bool exact() const override { return true; }

 private:
  dist::WorkPtr work_;
};

class TwoLevelWire : public GatherWire {
 public:
  explicit TwoLevelWire(const dist::NodeGroups& groups) : groups_(groups) {}
  void start(dist::Communicator&, const GatherPart& part, const at::Tensor&) override {
    // Across nodes first: the shards (b, l) of every node b for this local index l; the node's
    // ranks exchange those in finish.
    across_ = at::empty({groups_.inter->size() * part.data.numel()}, part.data.options());
    work_ = groups_.inter->all_gather(part.data, across_);
  }
  GatherPart finish(const at::Tensor& params, WaitClock& clock, int of, int index) override {
    clock.wait(work_);
    work_.reset();
    gather_in_node(groups_, across_, params, clock);
    used_on_current_stream(across_);
    across_ = at::Tensor();
    return values_part(params, of, index);
  }
  bool in_flight() const override { return work_ != nullptr; }
  bool side_stream() const override { return true; }

 private:
  const dist::NodeGroups& groups_;
  at::Tensor across_;
  dist::WorkPtr work_;
};

// Both block wires: the all-gathers of int8 blocks and their scales, rebuilt into the values.
class BlockWire : public GatherWire {
 public:
  bool in_flight() const override { return q_work_ != nullptr; }

 protected:
  void start_blocks(dist::Communicator& comm, const at::Tensor& q, const at::Tensor& scales,
                    int64_t parts) {
    parts_ = parts;
    q_recv_ = at::empty({comm.size() * q.numel()}, q.options());
    scales_recv_ = at::empty({comm.size() * scales.numel()}, scales.options());
    q_work_ = comm.all_gather(q, q_recv_);
    scales_work_ = comm.all_gather(scales, scales_recv_);
  }
  void finish_blocks(const at::Tensor& params, WaitClock& clock) {
    clock.wait(q_work_);
    clock.wait(scales_work_);
    q_work_.reset();
    scales_work_.reset();
    at::Tensor out = params;  // a handle: the values land in params' storage
    dequantize_blocks(q_recv_, scales_recv_, quant_blocks(params.numel() / parts_), parts_, out);
  }

  int64_t parts_ = 0;
  at::Tensor q_recv_, scales_recv_;
  dist::WorkPtr q_work_, scales_work_;
};

class QuantizedWire : public BlockWire {
 public:
  void start(dist::Communicator& comm, const GatherPart& part, const at::Tensor&) override {
    at::Tensor q, scales;
    quantize_blocks(part.data, quant_blocks(part.data.numel()), &q, &scales);
    start_blocks(comm, q, scales, comm.size());
  }
  GatherPart finish(const at::Tensor& params, WaitClock& clock, int of, int index) override {
    finish_blocks(params, clock);
    q_recv_ = scales_recv_ = at::Tensor();
    return values_part(params, of, index);
  }
};

class StoredWire : public BlockWire {
 public:
  explicit StoredWire(int64_t world) : world_(world) {}
  void start(dist::Communicator& comm, const GatherPart& part, const at::Tensor& params) override {
    // Every shard's blocks arrive in shard order whichever group sends them (the shards, or an
    // hpZ group's parts of world / hpz consecutive shards each).
    start_blocks(comm, part.data.to(params.device()), part.scales.to(params.device()), world_);
  }
  GatherPart finish(const at::Tensor& params, WaitClock& clock, int of, int index) override {
    finish_blocks(params, clock);
    GatherPart kept;
    if (of > 1) {
      // The blocks just received (world / of consecutive shards' worth), so the copy is as small
      // as the shard's kind.
      const int64_t per = world_ / of;
      const int64_t qn = q_recv_.numel() / world_, sn = scales_recv_.numel() / world_;
      kept = {q_recv_.narrow(0, index * per * qn, per * qn).clone(),
              scales_recv_.narrow(0, index * per * sn, per * sn).clone()};
    }
    q_recv_ = scales_recv_ = at::Tensor();
    return kept;
  }

 private:
  int64_t world_;
};

}  // namespace

std::unique_ptr<GatherWire> exact_wire() {
  return std::make_unique<ExactWire>();
}
std::unique_ptr<GatherWire> two_level_wire(const dist::NodeGroups& groups) {
  return std::make_unique<TwoLevelWire>(groups);
}
std::unique_ptr<GatherWire> quantized_wire() {
  return std::make_unique<QuantizedWire>();
}
std::unique_ptr<GatherWire> stored_wire(int64_t world) {
  return std::make_unique<StoredWire>(world);
}

ShardGather::ShardGather(std::unique_ptr<GatherWire> from_shards,
                         std::unique_ptr<GatherWire> from_copy, int hpz, int hpz_rank,
                         dist::Range own)
    : from_shards_(std::move(from_shards)),
      from_copy_(std::move(from_copy)),
      hpz_(hpz),
      hpz_rank_(hpz_rank),
      own_(own) {}

void ShardGather::start(dist::Communicator& comm, dist::Communicator* copy_group, ParamShard& shard,
                        const at::Tensor& params) {
  const size_t nbytes = static_cast<size_t>(params.numel() * params.element_size());
  if (copy_group != nullptr && copy_.data.defined()) {
    // hpZ: the copy kept at the last gather from the shards, over the (intra-node) hpz group.
    reads_shards_ = false;
    active_ = from_copy_.get();
    refill_storage(params, nbytes);
    active_->start(*copy_group, copy_, params);
    return;
  }
  reads_shards_ = true;
  active_ = from_shards_.get();
  GatherPart part = shard.stored();
  const at::Tensor resident = shard.resident();
  const bool offloaded =
      !part.data.defined() && !(resident.defined() && resident.device() == params.device());
  // A GPU model's offloaded shard goes to the device on a side stream, and its all-gather is
  // ordered after that copy, not after the compute stream: a prefetch then neither waits for the
  // unit running now nor holds it up. The full buffer is allocated for the side stream (so the
  // caching allocator does not hand out a block the compute stream may still be using), and
  // finish marks it used by the compute stream.
  std::optional<c10::StreamGuard> on_side;
  if (offloaded && !params.is_cpu() && active_->side_stream()) {
    on_side.emplace(copy_stream(params.device()));
  }
  on_side_ = on_side.has_value();
  refill_storage(params, nbytes);
  if (offloaded) {
    // Into this rank's slice of the full buffer first, then an in-place all-gather.
    at::Tensor own = params.narrow(0, own_.begin, own_.size());
    shard.load_into(own, /*non_blocking=*/active_->side_stream());
    part = {own, at::Tensor()};
  } else if (!part.data.defined()) {
    part = {resident, at::Tensor()};
  }
  active_->start(comm, part, params);
}

bool ShardGather::start_ranges(dist::Communicator& comm, ParamShard& shard,
                               const at::Tensor& params, const std::vector<dist::Range>& ranges) {
  if (hpz_ > 1 || !from_shards_->exact() || shard.stored().data.defined()) return false;
  refill_storage(params, static_cast<size_t>(params.numel() * params.element_size()));
  shard.load_into(params.narrow(0, own_.begin, own_.size()), /*non_blocking=*/false);
  // One broadcast per rank whose shard holds some of the ranges: its pieces packed, in order
  // (every rank knows the ranges, so every rank issues the same broadcasts).
  const int64_t per = params.numel() / comm.size();
  own_rank_ = comm.rank();
  for (int k = 0; k < comm.size(); ++k) {
    Pieces from;
    from.root = k;
    int64_t n = 0;
    for (const dist::Range& r : ranges) {
      const dist::Range piece = dist::intersect(r, {k * per, (k + 1) * per});
      if (piece.empty()) continue;
      from.ranges.push_back(piece);
      n += piece.size();
    }
    if (n == 0) continue;
    from.packed = at::empty({n}, params.options());
    if (k == comm.rank()) {
      int64_t at = 0;
      for (const dist::Range& piece : from.ranges) {
        from.packed.narrow(0, at, piece.size()).copy_(params.narrow(0, piece.begin, piece.size()));
        at += piece.size();
      }
    }
    from.work = comm.broadcast(from.packed, k);
    pieces_.push_back(std::move(from));
  }
  return true;
}

void ShardGather::finish(const at::Tensor& params, WaitClock& clock) {
  if (!pieces_.empty()) {
    at::Tensor out = params;  // a handle: the values land in params' storage
    for (Pieces& from : pieces_) {
      clock.wait(from.work);
      int64_t at = 0;
      for (const dist::Range& piece : from.ranges) {
        if (from.root != own_rank_) {
          out.narrow(0, piece.begin, piece.size()).copy_(from.packed.narrow(0, at, piece.size()));
        }
        at += piece.size();
      }
    }
    pieces_.clear();
    return;
  }
  if (active_ == nullptr) return;
  const bool keep = hpz_ > 1 && reads_shards_ && !copy_.data.defined();
  GatherPart kept = active_->finish(params, clock, keep ? hpz_ : 1, hpz_rank_);
  active_ = nullptr;
  reads_shards_ = false;
  if (on_side_) used_on_current_stream(params);
  on_side_ = false;
  if (kept.data.defined()) copy_ = std::move(kept);
}

int64_t ShardGather::copy_bytes() const {
  int64_t n = 0;
  for (const at::Tensor* t : {&copy_.data, &copy_.scales})
    if (t->defined()) n += t->numel() * static_cast<int64_t>(t->element_size());
  return n;
}

}  // namespace zt::zero
