#include "core/zero/bucket.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "base/error.h"
#include "core/zero/block_quant.h"
#include "core/zero/released_storage.h"

namespace zt::zero {
namespace {

at::Tensor new_flat(const dist::FlatLayout& layout) {
  const auto& first = layout.entries().front();
  for (const auto& e : layout.entries()) {
    ZT_CHECK(e.param.scalar_type() == first.param.scalar_type() &&
                 e.param.device() == first.param.device(),
             "parameters of one flat buffer must share dtype and device: ", e.name, " is ",
             e.param.scalar_type(), " on ", e.param.device(), ", ", first.name, " is ",
             first.param.scalar_type(), " on ", first.param.device());
  }
  return at::empty({layout.padded_numel()}, first.param.options().requires_grad(false));
}

}  // namespace

Bucket::Bucket(dist::FlatLayout layout, size_t unit, const BucketOptions& options)
    : layout_(std::move(layout)),
      unit_(unit),
      options_(options),
      params_(new_flat(layout_)),
      parts_(plan_bucket(options_, layout_, params_, /*adopting=*/false, at::Tensor())) {
  layout_.bind_parameters(params_);
  pending_ = static_cast<int>(layout_.entries().size());
}

Bucket::Bucket(dist::FlatLayout layout, size_t unit, const BucketOptions& options, at::Tensor flat,
               at::Tensor shard)
    : layout_(std::move(layout)),
      unit_(unit),
      options_(options),
      params_(std::move(flat)),
      parts_(plan_bucket(options_, layout_, params_, /*adopting=*/true, shard)),
      gathered_(!shard.defined()),
      adopted_(true) {
  ZT_INTERNAL_ASSERT(params_.numel() == layout_.padded_numel(), "adopted flat buffer of ",
                     params_.numel(), " elements for a layout of ", layout_.padded_numel());
  ZT_INTERNAL_ASSERT(!shard.defined() || shard.numel() == stepped().size(), "adopted shard of ",
                     shard.numel(), " elements for a slice of ", stepped().size());
  pending_ = static_cast<int>(layout_.entries().size());
}

at::Tensor Bucket::own_slice() const {
  return params_.narrow(0, stepped().begin, stepped().size());
}

at::Tensor Bucket::param_target() const {
  if (sharded()) return parts_.shard->resident();
  // Otherwise the full buffer is always resident, so the step writes its stepped range in place
  // and publish_params all-gathers from there (no second copy to keep in sync).
  return stepped().size() == params_.numel() ? params_ : own_slice();
}

void Bucket::keep_shard() {
  if (parts_.round_to_blocks && gathered_) {
    // DeepSpeed quantizes a persistent frozen parameter's partitions too, and the full values it
    // keeps are gathered from them: the model computes with each shard's rebuilt blocks.
    const QuantBlocks qb = quant_blocks(layout_.shard_numel());
    at::Tensor q, scales;
    quantize_blocks(params_, qb, &q, &scales, options_.world);
    dequantize_blocks(q, scales, qb, options_.world, params_);
    return;
  }
  if (!sharded() || !gathered_) return;
  parts_.gather->drop_copy();
  parts_.shard->keep(own_slice());
}

void Bucket::assign(const at::Tensor& full, WaitClock& clock) {
  ZT_INTERNAL_ASSERT(options_.frozen && full.numel() == layout_.padded_numel(),
                     "assign: a frozen buffer's full values");
  if (!sharded()) {
    params_.copy_(full);
    return;
  }
  parts_.gather->drop_copy();
  release_params(clock);
  parts_.shard->keep(full.narrow(0, stepped().begin, stepped().size()));
}

at::Tensor Bucket::values(dist::Communicator& comm, WaitClock& clock) {
  finish_param_gather(clock);
  if (sharded()) {
    at::Tensor stored = parts_.shard->stored_values(comm, clock);
    if (stored.defined()) return stored;
  }
  if (gathered_ && !partial_) return params_.clone();
  const bool was_gathered = gathered_;
  start_param_gather(comm);
  if (was_gathered) {  // a partial gather made whole, and left gathered as it was
    finish_param_gather(clock);
    return params_.clone();
  }
  finish_param_gather(clock);
  at::Tensor out = params_.clone();
  release_params(clock);
  return out;
}

int64_t Bucket::resident_bytes() const {
  return sharded() ? parts_.shard->bytes() : full_param_bytes();
}

void Bucket::move_shard_to(NvmeParamSwapper* swapper, size_t slot) {
  ZT_INTERNAL_ASSERT(sharded(), "only a stage-3 shard moves to NVMe");
  const int64_t pad_begin = std::max<int64_t>(layout_.numel() - stepped().begin, 0);
  parts_.shard = move_to_nvme(*parts_.shard, swapper, slot, pad_begin);
}

at::Tensor Bucket::checkout_target(bool read) {
  return sharded() ? parts_.shard->checkout(read) : param_target();
}

void Bucket::checkin_target(bool written) {
  if (sharded()) parts_.shard->checkin(written);
}

void Bucket::prefetch_shard() {
  if (sharded() && !gathered_ && !gather_in_flight()) parts_.shard->prefetch();
}

void Bucket::cast_params(at::ScalarType dtype) {
  if (!gathered_) {  // partitioned construction: the next gather fills the new buffer
    params_ = empty_released(layout_.padded_numel(), params_.options().dtype(dtype));
    view_released(layout_, params_);
  } else {
    params_ = params_.to(dtype);
    layout_.bind_parameters(params_);
  }
  if (sharded()) parts_.shard->cast(dtype);
}

void Bucket::publish_params(dist::Communicator& comm, WaitClock& clock) {
  if (sharded()) {
    parts_.gather->drop_copy();
    if (!gathered_ && !gather_in_flight()) return;  // gathered from the shard on next use
    // Resident now (a gathered scope, a checkpoint load): the owned slice takes the new shard.
    finish_param_gather(clock);
    own_slice().copy_(checkout_target(/*read=*/true));
    checkin_target(/*written=*/false);
  }
  if (parts_.publish) parts_.publish(own_slice(), params_, comm, clock);
  if (partial_) {
    // Every rank's updated range arrived, the experts nobody routed to included.
    partial_ = !parts_.publish;
  }
}

int64_t Bucket::full_param_bytes() const {
  return layout_.padded_numel() * static_cast<int64_t>(params_.element_size());
}

int64_t Bucket::secondary_bytes() const {
  return parts_.gather ? parts_.gather->copy_bytes() : 0;
}

int64_t Bucket::start_param_gather(dist::Communicator& comm, dist::Communicator* secondary,
                                   const std::vector<dist::Range>* only) {
  int64_t allocated = full_param_bytes();
  if (partial_ && only == nullptr) {
    // Gathered for some experts, now wanted whole (a gathered scope, a checkpoint): again.
    WaitClock untimed;
    release_params(untimed);
    allocated = 0;  // the same bytes as before
  }
  if (gathered_ || gather_in_flight()) return 0;
  if (only != nullptr && parts_.gather->start_ranges(comm, *parts_.shard, params_, *only)) {
    partial_ = true;
    return allocated;
  }
  parts_.gather->start(comm, secondary, *parts_.shard, params_);
  return allocated;
}

void Bucket::finish_param_gather(WaitClock& clock) {
  if (gathered_ || !gather_in_flight()) return;
  parts_.gather->finish(params_, clock);  // the current (compute) stream waits for it
  gathered_ = true;
}

int64_t Bucket::release_params(WaitClock& clock) {
  if (!sharded() || (!gathered_ && !gather_in_flight())) return 0;
  finish_param_gather(clock);  // an all-gather must not write into freed memory
  release_storage(params_);
  gathered_ = false;
  partial_ = false;
  return full_param_bytes();
}

bool Bucket::add_grad(size_t entry, const at::Tensor& grad) {
  if (grad.defined()) {
    const dist::FlatEntry& e = layout_.entries()[entry];
    parts_.grads->add(e.range, grad.reshape({-1}));
  }
  return --pending_ == 0;
}

void Bucket::start_grad_sync(dist::Communicator& comm) {
  if (launched_) return;
  launched_ = true;
  parts_.grads->start(comm);
}

void Bucket::finish_grad_sync(WaitClock& clock) {
  parts_.grads->finish(clock);
}

void Bucket::next_micro_step() {
  pending_ = static_cast<int>(layout_.entries().size());
  launched_ = false;
}

bool steps_whole_buffers(const std::vector<std::unique_ptr<Bucket>>& buckets) {
  return std::all_of(buckets.begin(), buckets.end(), [](const std::unique_ptr<Bucket>& b) {
    return b->stepped().size() == b->layout().padded_numel();
  });
}

}  // namespace zt::zero
