#include "core/zero/bucket.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>

#include <ATen/ATen.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "base/error.h"
#include "core/zero/block_quant.h"
#include "core/zero/hierarchical_reduce.h"
#include "core/zero/nvme_params.h"
#include "core/zero/pinned_host.h"
#include "core/zero/quantized_reduce.h"
#include "core/zero/released_storage.h"

namespace zt::zero {

Bucket::Bucket(dist::FlatLayout layout, size_t unit, const BucketOptions& options)
    : layout_(std::move(layout)), unit_(unit), options_(options) {
  stepped_ = options_.stage == 0 ? dist::Range{0, layout_.padded_numel()}
                                 : layout_.shard_range(options_.rank);
  const auto& first = layout_.entries().front();
  for (const auto& e : layout_.entries()) {
    ZT_CHECK(e.param.scalar_type() == first.param.scalar_type() &&
                 e.param.device() == first.param.device(),
             "parameters of one flat buffer must share dtype and device: ", e.name, " is ",
             e.param.scalar_type(), " on ", e.param.device(), ", ", first.name, " is ",
             first.param.scalar_type(), " on ", first.param.device());
  }
  params_ = at::empty({layout_.padded_numel()}, first.param.options().requires_grad(false));
  layout_.bind_parameters(params_);
  if (!options_.frozen) allocate_grads();
}

Bucket::Bucket(dist::FlatLayout layout, size_t unit, const BucketOptions& options, at::Tensor flat,
               at::Tensor shard)
    : layout_(std::move(layout)), unit_(unit), options_(options), adopted_(true) {
  ZT_INTERNAL_ASSERT(options_.stage == 3, "only stage 3 adopts partitioned buffers");
  ZT_INTERNAL_ASSERT(flat.numel() == layout_.padded_numel(), "adopted flat buffer of ",
                     flat.numel(), " elements for a layout of ", layout_.padded_numel());
  stepped_ = layout_.shard_range(options_.rank);
  params_ = std::move(flat);
  if (shard.defined()) {
    ZT_INTERNAL_ASSERT(shard.numel() == stepped_.size(), "adopted shard of ", shard.numel(),
                       " elements for a slice of ", stepped_.size());
    param_shard_ = std::move(shard);
    gathered_ = false;
  }
  allocate_grads();
}

void Bucket::allocate_grads() {
  const at::TensorOptions gopt = params_.options().dtype(options_.grad_dtype);
  if (options_.stage <= 1) {
    grad_full_ = at::zeros({layout_.padded_numel()}, gopt);
  } else {
    // Never read before the window's first reduce-scatter writes it (shard_has_grad_), so it is
    // not zeroed: its pages stay untouched (and off the resident set) until the first backward,
    // which keeps them out of the peak of building and casting a model that barely fits.
    // release_grad_shard: it holds bytes only from that reduce-scatter to the step
    // (hold_grad_shard, zero_grads).
    grad_shard_ = options_.release_grad_shard ? empty_released(layout_.shard_numel(), gopt)
                                              : at::empty({layout_.shard_numel()}, gopt);
  }
  pending_ = static_cast<int>(layout_.entries().size());
}

at::Tensor Bucket::param_target() const {
  if (options_.stage == 0) return params_;
  if (options_.stage == 3 && !options_.persistent) return param_shard_;
  // Stages 1-2, and a persistent stage-3 buffer: the full buffer is always resident, so the step
  // writes its owned slice in place and publish_params all-gathers from there (no second copy
  // to keep in sync, on one rank or many).
  return params_.narrow(0, stepped_.begin, stepped_.size());
}

namespace {

// A copy of `shard` in `dtype` where a stage-3 shard of `params` lives: the parameters' device,
// or host memory with offload_param (page-locked when asked and the parameters are on a GPU, so
// copies can be asynchronous; exactly sized, pinned_host.h).
at::Tensor shard_copy(const at::Tensor& shard, const at::Tensor& params, const BucketOptions& o,
                      at::ScalarType dtype) {
  if (o.host_shard && !params.is_cpu() && o.pin_shard) {
    return pinned_host_copy(shard, dtype, params.device().type());
  }
  at::TensorOptions where = params.options().dtype(dtype);
  if (o.host_shard) where = where.device(at::kCPU);
  at::Tensor out = at::empty({shard.numel()}, where);
  out.copy_(shard);
  return out;
}

}  // namespace

void Bucket::keep_shard() {
  if (options_.quantized_storage && options_.persistent && gathered_) {
    // DeepSpeed quantizes a persistent frozen parameter's partitions too, and the full values it
    // keeps are gathered from them: the model computes with each shard's rebuilt blocks.
    const QuantBlocks qb = quant_blocks(layout_.shard_numel());
    at::Tensor q, scales;
    quantize_blocks(params_, qb, &q, &scales, options_.world);
    dequantize_blocks(q, scales, qb, options_.world, params_);
    return;
  }
  if (options_.stage != 3 || options_.persistent || !gathered_) return;
  drop_secondary();
  at::Tensor own = params_.narrow(0, stepped_.begin, stepped_.size());
  if (options_.quantized_storage) {
    quantize_shard(own);
  } else if (swapper_) {
    swapper_->acquire(swap_slot_, /*read=*/false).copy_(own);
    swapper_->release(swap_slot_, /*write_back=*/true);
  } else if (param_shard_.defined()) {
    param_shard_.copy_(own);  // in place: checkpoints and the optimizer hold this tensor
  } else {
    param_shard_ = shard_copy(own, params_, options_, params_.scalar_type());
  }
}

void Bucket::quantize_shard(const at::Tensor& own) {
  at::Tensor q, scales;
  quantize_blocks(own, quant_blocks(own.numel()), &q, &scales);
  if (options_.host_shard && !q.is_cpu()) {
    q = shard_copy(q, params_, options_, at::kChar);
    scales = shard_copy(scales, params_, options_, at::kFloat);
  }
  quant_shard_ = q;
  quant_scales_ = scales;
}

void Bucket::assign(const at::Tensor& full, WaitClock& clock) {
  ZT_INTERNAL_ASSERT(options_.frozen && full.numel() == layout_.padded_numel(),
                     "assign: a frozen buffer's full values");
  drop_secondary();
  if (options_.stage != 3 || options_.persistent) {
    params_.copy_(full);
    return;
  }
  release_params(clock);
  at::Tensor own = full.narrow(0, stepped_.begin, stepped_.size());
  if (options_.quantized_storage) {
    quantize_shard(own);
  } else {
    checkout_target(/*read=*/false).copy_(own);  // the resident shard, or its file
    checkin_target(/*written=*/true);
  }
}

at::Tensor Bucket::values(dist::Communicator& comm, WaitClock& clock) {
  if (options_.stage != 3 || options_.persistent || gathered_ || gather_work_) {
    finish_param_gather(clock);
    if (!options_.quantized_storage || options_.persistent) return params_.clone();
  }
  if (options_.quantized_storage) {
    // The stored blocks themselves, rebuilt in fp32 (a gathered copy holds them in the compute
    // dtype, rounded once more).
    at::Tensor q = quant_shard_.to(params_.device()), scales = quant_scales_.to(params_.device());
    at::Tensor all_q = at::empty({comm.size() * q.numel()}, q.options());
    at::Tensor all_scales = at::empty({comm.size() * scales.numel()}, scales.options());
    clock.wait(comm.all_gather(q, all_q));
    clock.wait(comm.all_gather(scales, all_scales));
    at::Tensor out = at::empty({layout_.padded_numel()}, params_.options().dtype(at::kFloat));
    dequantize_blocks(all_q, all_scales, quant_blocks(layout_.shard_numel()), comm.size(), out);
    return out;
  }
  start_param_gather(comm);
  finish_param_gather(clock);
  at::Tensor out = params_.clone();
  release_params(clock);
  return out;
}

int64_t Bucket::resident_bytes() const {
  if (options_.stage != 3 || options_.persistent) return full_param_bytes();
  auto bytes = [](const at::Tensor& t) {
    return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : int64_t{0};
  };
  return bytes(param_shard_) + bytes(quant_shard_) + bytes(quant_scales_);
}

void Bucket::move_shard_to(NvmeParamSwapper* swapper, size_t slot) {
  ZT_INTERNAL_ASSERT(options_.stage == 3 && !options_.persistent && param_shard_.defined(),
                     "only a stage-3 shard moves to NVMe");
  swapper_ = swapper;
  swap_slot_ = slot;
  swapper_->acquire(slot, /*read=*/false).copy_(param_shard_);
  swapper_->release(slot, /*write_back=*/true);
  param_shard_ = at::Tensor();
}

at::Tensor Bucket::checkout_target(bool read) {
  if (!swapper_) return param_target();
  at::Tensor t = swapper_->acquire(swap_slot_, read);
  // The padding past the last parameter belongs to no parameter and is never stepped; zeros, as
  // in the flat buffer, so the file's bytes do not depend on what the buffer held before.
  const int64_t pad_begin = std::max<int64_t>(layout_.numel() - stepped_.begin, 0);
  if (!read && pad_begin < t.numel()) t.narrow(0, pad_begin, t.numel() - pad_begin).zero_();
  return t;
}

void Bucket::checkin_target(bool written) {
  if (swapper_) swapper_->release(swap_slot_, written);
}

void Bucket::prefetch_shard() {
  if (swapper_ && !gathered_ && !gather_work_) swapper_->prefetch(swap_slot_);
}

void Bucket::cast_params(at::ScalarType dtype) {
  if (!gathered_) {  // partitioned construction: the next gather fills the new buffer
    params_ = empty_released(layout_.padded_numel(), params_.options().dtype(dtype));
    view_released(layout_, params_);
    if (param_shard_.defined()) param_shard_ = shard_copy(param_shard_, params_, options_, dtype);
    return;
  }
  at::Tensor flat = params_.to(dtype);
  layout_.bind_parameters(flat);
  params_ = flat;
  if (param_shard_.defined()) param_shard_ = shard_copy(param_shard_, params_, options_, dtype);
}

void Bucket::publish_params(dist::Communicator& comm, WaitClock& clock) {
  if (options_.stage == 0) return;
  drop_secondary();
  if (options_.stage == 3 && !options_.persistent) {
    if (!gathered_ && !gather_work_) return;  // gathered from the shard on next use
    // Resident now (a gathered scope, a checkpoint load): the owned slice takes the new shard.
    finish_param_gather(clock);
    at::Tensor own = params_.narrow(0, stepped_.begin, stepped_.size());
    own.copy_(checkout_target(/*read=*/true));
    checkin_target(/*written=*/false);
  }
  if (options_.world == 1) return;
  // In place: the stepped range is this rank's slice of params_ (MPI_IN_PLACE; NCCL's in-place
  // form), so the updated slice is not copied first.
  at::Tensor own = params_.narrow(0, stepped_.begin, stepped_.size());
  if (options_.hierarchical_reduce != nullptr && options_.stage <= 2) {
    // Across nodes first: this local index's slices (b, l) of every node b cross the link once;
    // then the node's ranks exchange them.
    const dist::NodeGroups& g = *options_.hierarchical_reduce;
    at::Tensor across = at::empty({g.inter->size() * own.numel()}, own.options());
    clock.wait(g.inter->all_gather(own, across));
    gather_in_node(g, across, clock);
    return;
  }
  clock.wait(comm.all_gather(own, params_));
}

int64_t Bucket::full_param_bytes() const {
  return layout_.padded_numel() * static_cast<int64_t>(params_.element_size());
}

int64_t Bucket::secondary_bytes() const {
  int64_t n = 0;
  for (const at::Tensor* t : {&secondary_, &secondary_scales_})
    if (t->defined()) n += t->numel() * static_cast<int64_t>(t->element_size());
  return n;
}

void Bucket::drop_secondary() {
  secondary_ = at::Tensor();
  secondary_scales_ = at::Tensor();
}

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

}  // namespace

// qwZ: starts the all-gathers of `part`'s int8 blocks and scales over `comm`.
void Bucket::start_quantized_gather(dist::Communicator& comm, const at::Tensor& part) {
  const QuantBlocks qb = quant_blocks(part.numel());
  at::Tensor q, scales;
  quantize_blocks(part, qb, &q, &scales);
  quant_parts_ = comm.size();
  quant_recv_ = at::empty({quant_parts_ * q.numel()}, q.options());
  scales_recv_ = at::empty({quant_parts_ * scales.numel()}, scales.options());
  gather_work_ = comm.all_gather(q, quant_recv_);
  scales_work_ = comm.all_gather(scales, scales_recv_);
}

void Bucket::start_stored_gather(dist::Communicator& comm, const at::Tensor& q,
                                 const at::Tensor& scales) {
  // Every shard's blocks arrive in shard order whichever group sends them (the primary shards, or
  // an hpZ group's parts of world / hpz consecutive shards each).
  at::Tensor q_dev = q.to(params_.device()), scales_dev = scales.to(params_.device());
  quant_parts_ = options_.world;
  quant_recv_ = at::empty({comm.size() * q_dev.numel()}, q_dev.options());
  scales_recv_ = at::empty({comm.size() * scales_dev.numel()}, scales_dev.options());
  gather_work_ = comm.all_gather(q_dev, quant_recv_);
  scales_work_ = comm.all_gather(scales_dev, scales_recv_);
}

int64_t Bucket::start_param_gather(dist::Communicator& comm, dist::Communicator* secondary) {
  if (gathered_ || gather_work_) return 0;
  const int64_t nbytes = full_param_bytes();
  if (secondary != nullptr && secondary_.defined()) {
    // hpZ: the copy kept at the last gather from the shards, over the (intra-node) hpz group.
    gather_from_shards_ = false;
    refill_storage(params_, static_cast<size_t>(nbytes));
    if (options_.quantized_storage) {
      start_stored_gather(*secondary, secondary_, secondary_scales_);
    } else if (options_.quantized_weights) {
      start_quantized_gather(*secondary, secondary_);
    } else {
      gather_work_ = secondary->all_gather(secondary_, params_);
    }
    return nbytes;
  }
  gather_from_shards_ = true;
  if (options_.quantized_storage) {
    refill_storage(params_, static_cast<size_t>(nbytes));
    start_stored_gather(comm, quant_shard_, quant_scales_);
    return nbytes;
  }
  const bool offloaded = swapper_ || param_shard_.device() != params_.device();
  // A GPU model's offloaded shard goes to the device on a side stream, and its all-gather is
  // ordered after that copy, not after the compute stream: a prefetch then neither waits for the
  // unit running now nor holds it up. The full buffer is allocated for the side stream (so the
  // caching allocator does not hand out a block the compute stream may still be using), and
  // finish_param_gather marks it used by the compute stream. (qwZ quantizes on the compute
  // stream.)
  std::optional<c10::StreamGuard> on_side;
  if (offloaded && !params_.is_cpu() && !options_.quantized_weights) {
    on_side.emplace(copy_stream(params_.device()));
  }
  gather_on_side_ = on_side.has_value();
  refill_storage(params_, static_cast<size_t>(nbytes));
  if (offloaded) {
    // Offloaded shard: into this rank's slice of the full buffer first, then an in-place
    // all-gather (the swap buffer is free again at once).
    at::Tensor own = params_.narrow(0, stepped_.begin, stepped_.size());
    if (swapper_) {
      own.copy_(swapper_->acquire(swap_slot_, /*read=*/true));
      swapper_->release(swap_slot_, /*write_back=*/false);
    } else {
      own.copy_(param_shard_, /*non_blocking=*/!options_.quantized_weights);
    }
    if (options_.quantized_weights) {
      start_quantized_gather(comm, own);
    } else {
      start_exact_gather(comm, own);
    }
  } else if (options_.quantized_weights) {
    start_quantized_gather(comm, param_shard_);
  } else {
    start_exact_gather(comm, param_shard_);
  }
  return nbytes;
}

void Bucket::start_exact_gather(dist::Communicator& comm, const at::Tensor& part) {
  if (options_.hierarchical_gather == nullptr) {
    gather_work_ = comm.all_gather(part, params_);
    return;
  }
  // Across nodes first: the shards (b, l) of every node b for this local index l; the node's
  // ranks exchange those in finish_param_gather.
  const dist::NodeGroups& g = *options_.hierarchical_gather;
  across_ = at::empty({g.inter->size() * part.numel()}, part.options());
  gather_work_ = g.inter->all_gather(part, across_);
}

void Bucket::gather_in_node(const dist::NodeGroups& g, const at::Tensor& across, WaitClock& clock) {
  const int64_t nodes = g.inter->size(), local = g.intra->size(), n = across.numel() / nodes;
  at::Tensor by_local = at::empty({local * nodes * n}, across.options());
  clock.wait(g.intra->all_gather(across, by_local));
  // by_local holds slice (b, l) at [l][b]; the flat buffer holds it at b * L + l.
  params_.view({nodes, local, n}).copy_(by_local.view({local, nodes, n}).transpose(0, 1));
}

void Bucket::finish_param_gather(WaitClock& clock) {
  if (gathered_ || !gather_work_) return;
  clock.wait(gather_work_);  // the current (compute) stream waits for the all-gather
  gather_work_.reset();
  if (across_.defined()) {
    gather_in_node(*options_.hierarchical_gather, across_, clock);
    if (gather_on_side_) {  // allocated for the side stream, last used by the compute stream
      const c10::impl::VirtualGuardImpl impl(across_.device().type());
      impl.recordDataPtrOnStream(across_.storage().data_ptr(), impl.getStream(across_.device()));
    }
    across_ = at::Tensor();
  }
  if (scales_work_) {
    // qwZ: rebuild the full buffer from every part's blocks.
    clock.wait(scales_work_);
    scales_work_.reset();
    const int64_t part = params_.numel() / quant_parts_;
    dequantize_blocks(quant_recv_, scales_recv_, quant_blocks(part), quant_parts_, params_);
    if (options_.quantized_storage && options_.hpz > 1 && gather_from_shards_ &&
        !secondary_.defined()) {
      // hpZ: this rank's part of the hpz group's partition, kept as the blocks just received
      // (world / hpz consecutive shards' worth), so the copy is as small as the shard's kind.
      const int64_t per = options_.world / options_.hpz;
      const int64_t qn = quant_recv_.numel() / options_.world;
      const int64_t sn = scales_recv_.numel() / options_.world;
      secondary_ = quant_recv_.narrow(0, options_.hpz_rank * per * qn, per * qn).clone();
      secondary_scales_ = scales_recv_.narrow(0, options_.hpz_rank * per * sn, per * sn).clone();
    }
    quant_recv_ = at::Tensor();
    scales_recv_ = at::Tensor();
  }
  if (gather_on_side_) {
    // Freed later by the compute stream's side of things: the allocator must not reuse the block
    // for the side stream before the compute stream is done with it.
    const c10::impl::VirtualGuardImpl impl(params_.device().type());
    impl.recordDataPtrOnStream(params_.storage().data_ptr(), impl.getStream(params_.device()));
    gather_on_side_ = false;
  }
  gathered_ = true;
  if (options_.hpz > 1 && gather_from_shards_ && !secondary_.defined()) {
    // hpZ: keep this rank's part of the hpz group's partition of the values just gathered.
    const int64_t part = layout_.padded_numel() / options_.hpz;
    secondary_ = params_.narrow(0, options_.hpz_rank * part, part).clone();
  }
  gather_from_shards_ = false;
}

int64_t Bucket::release_params(WaitClock& clock) {
  if (options_.persistent || (!gathered_ && !gather_work_)) return 0;
  finish_param_gather(clock);  // an all-gather must not write into freed memory
  release_storage(params_);
  gathered_ = false;
  return full_param_bytes();
}

bool Bucket::add_grad(size_t entry, const at::Tensor& grad) {
  if (grad.defined()) {
    const dist::FlatEntry& e = layout_.entries()[entry];
    at::Tensor flat_g = grad.reshape({-1});
    if (options_.stage <= 1) {
      grad_full_.narrow(0, e.range.begin, e.range.size()).add_(flat_g);
    } else {
      if (!staging_.defined())
        staging_ = at::zeros({layout_.padded_numel()}, grad_shard_.options());
      staging_.narrow(0, e.range.begin, e.range.size()).add_(flat_g);
    }
  }
  return --pending_ == 0;
}

void Bucket::start_grad_sync(dist::Communicator& comm) {
  if (launched_) return;
  launched_ = true;
  const at::ScalarType comm_dtype = options_.comm_dtype;
  const bool cast = comm_dtype != options_.grad_dtype;
  auto prepare = [&](const at::Tensor& src) {
    at::Tensor in = cast ? src.to(comm_dtype) : src;
    if (options_.pre_reduce_scale != 1.0) in.mul_(options_.pre_reduce_scale);
    return in;
  };
  const int64_t shard = layout_.shard_numel();
  if (options_.hierarchical_reduce != nullptr && options_.stage <= 2) {
    at::Tensor& src = options_.stage <= 1 ? grad_full_ : staging_;
    if (!src.defined()) {  // stage 2: no parameter of this bucket got a gradient
      src = at::zeros({layout_.padded_numel()}, grad_shard_.options());
    }
    comm_in_ = prepare(src);
    hierarchical_reduce_ = std::make_shared<HierarchicalReduce>(
        *options_.hierarchical_reduce,
        options_.stage == 0 ? HierarchicalReduce::Kind::kAllReduce
                            : HierarchicalReduce::Kind::kReduceScatter,
        comm_in_);
    return;
  }
  switch (options_.stage) {
    case 0:
      comm_in_ = prepare(grad_full_);
      grad_work_ = comm.all_reduce(comm_in_, dist::ReduceOp::kSum);
      break;
    case 1:
      comm_in_ = prepare(grad_full_);
      reduced_ = at::empty({shard}, comm_in_.options());
      grad_work_ = comm.reduce_scatter(comm_in_, reduced_, dist::ReduceOp::kSum);
      break;
    default:
      if (!staging_.defined()) {  // no parameter of this bucket got a gradient
        staging_ = at::zeros({layout_.padded_numel()}, grad_shard_.options());
      }
      comm_in_ = prepare(staging_);
      if (options_.quantized_reduce != nullptr) {
        quantized_reduce_ =
            std::make_shared<QuantizedReduceScatter>(*options_.quantized_reduce, comm_in_);
      } else if (shard_has_grad_ || cast) {
        // The first micro-step of a window reduces straight into the accumulation buffer.
        reduced_ = at::empty({shard}, comm_in_.options());
        grad_work_ = comm.reduce_scatter(comm_in_, reduced_, dist::ReduceOp::kSum);
      } else {
        hold_grad_shard();
        grad_work_ = comm.reduce_scatter(comm_in_, grad_shard_, dist::ReduceOp::kSum);
      }
      break;
  }
}

void Bucket::finish_grad_sync(WaitClock& clock) {
  if (quantized_reduce_) {
    reduced_ = quantized_reduce_->finish(clock).to(options_.grad_dtype);
    quantized_reduce_.reset();
  } else if (hierarchical_reduce_) {
    at::Tensor out = hierarchical_reduce_->finish(clock);
    if (options_.stage != 0) reduced_ = out;  // stage 0 summed comm_in_ in place
    hierarchical_reduce_.reset();
  } else if (grad_work_) {
    clock.wait(grad_work_);
    grad_work_.reset();
  } else {
    return;
  }
  const at::ScalarType acc = options_.grad_dtype;
  switch (options_.stage) {
    case 0:
      if (!comm_in_.is_same(grad_full_)) grad_full_.copy_(comm_in_);
      break;
    case 1:
      if (reduced_.scalar_type() != acc) reduced_ = reduced_.to(acc);
      break;
    default:
      if (reduced_.defined()) {
        hold_grad_shard();
        if (shard_has_grad_) {
          grad_shard_.add_(reduced_);
        } else {
          grad_shard_.copy_(reduced_);
        }
        reduced_ = at::Tensor();
      }
      shard_has_grad_ = true;
      break;
  }
  comm_in_ = at::Tensor();
  if (options_.stage >= 2) staging_ = at::Tensor();  // transient: freed as soon as it is reduced
}

void Bucket::hold_grad_shard() {
  if (options_.release_grad_shard && grad_shard_.storage().nbytes() == 0) {
    refill_storage(grad_shard_,
                   static_cast<size_t>(grad_shard_.numel() * grad_shard_.element_size()));
  }
}

void Bucket::next_micro_step() {
  pending_ = static_cast<int>(layout_.entries().size());
  launched_ = false;
}

at::Tensor Bucket::owned_grad() const {
  switch (options_.stage) {
    case 0: return grad_full_;
    case 1: return reduced_;
    default: return shard_has_grad_ ? grad_shard_ : at::Tensor();
  }
}

void Bucket::zero_grads() {
  ZT_INTERNAL_ASSERT(!grad_work_ && !quantized_reduce_ && !hierarchical_reduce_,
                     "zero_grads with a gradient reduction in flight");
  if (grad_full_.defined()) grad_full_.zero_();
  shard_has_grad_ = false;  // the next reduce-scatter overwrites grad_shard_ (no zeroing pass)
  if (options_.release_grad_shard && grad_shard_.defined() && grad_shard_.storage().nbytes() > 0) {
    release_storage(grad_shard_);
  }
  reduced_ = at::Tensor();
  staging_ = at::Tensor();
}

int64_t Bucket::grad_bytes() const {
  int64_t n = 0;
  if (grad_full_.defined()) n += grad_full_.numel() * grad_full_.element_size();
  if (grad_shard_.defined()) n += grad_shard_.numel() * grad_shard_.element_size();
  return n;
}

}  // namespace zt::zero
