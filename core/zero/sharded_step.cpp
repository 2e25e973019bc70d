#include "core/zero/sharded_step.h"

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "base/error.h"
#include "base/logging.h"
#include "core/zero/host_offload.h"
#include "core/zero/nvme_optimizer.h"
#include "core/zero/pinned_host.h"
#include "optim/clip.h"
#include "optim/cpu_adam.h"

namespace zt::zero {

c10::Device master_device(const c10::Device& param_device, bool offload_optimizer) {
  return offload_optimizer ? c10::Device(at::kCPU) : param_device;
}

ShardedStep::ShardedStep(const EngineOptions& options,
                         std::vector<std::unique_ptr<Bucket>>& buckets, dist::Communicator& comm,
                         WaitClock& clock, double post_reduce_scale)
    : options_(options),
      buckets_(buckets),
      comm_(comm),
      clock_(clock),
      post_reduce_scale_(post_reduce_scale) {
  ZT_CHECK(options_.param_groups.freeze_patterns.empty(),
           "EngineOptions.param_groups.freeze_patterns must be empty: freeze parameters "
           "(requires_grad false) before building the engine, as zt::initialize does");
  // One grouping over every trainable parameter, so layer-wise LR decay sees the whole model.
  std::vector<optim::ParamInfo> all;
  for (auto& b : buckets_) {
    for (const auto& e : b->layout().entries()) all.push_back({e.name, e.range.size(), 0});
  }
  const optim::ParamGrouping grouping = optim::build_param_groups(all, options_.param_groups);
  // One optimizer kind for every bucket, resolved once from the master's device.
  const optim::OptimizerSpec spec = optim::resolve_for_device(
      options_.optimizer, master_device(compute_device(), options_.offload_optimizer));
  size_t next = 0;
  for (auto& b : buckets_) {
    Slot slot;
    slot.grouping.groups = grouping.groups;
    for (const auto& e : b->layout().entries()) {
      slot.params.push_back({e.name, e.range.size(), e.range.begin});
      slot.grouping.group_of.push_back(grouping.group_of[next++]);
    }
    slot.optimizer = optim::make_shard_optimizer(spec);
    slots_.push_back(std::move(slot));
  }
  if (options_.offload_optimizer && !buckets_.empty() && buckets_.front()->params().is_cuda()) {
    host_offload_ = std::make_unique<HostOffload>(buckets_.front()->params().device());
  }
  if (options_.nvme_optimizer.enabled()) make_nvme_swapper();
}

// NVMe optimizer offload steps CpuAdam on host chunks: its update is elementwise (a chunk boundary
// changes no bit, optim/cpu_adam_kernel.h) and its state is exp_avg and exp_avg_sq laid out like
// the master.
void ShardedStep::make_nvme_swapper() {
  ZT_CHECK(options_.offload_optimizer,
           "EngineOptions.nvme_optimizer needs offload_optimizer (the master lives on the host "
           "between reads and writes)");
  const optim::OptimizerKind kind =
      optim::resolve_for_device(options_.optimizer, c10::Device(at::kCPU)).type;
  ZT_CHECK(kind == optim::OptimizerKind::kCpuAdam,
           "zero_optimization.offload_optimizer.device nvme steps with CPUAdam (optimizer type "
           "Adam or AdamW); optimizer ",
           optim::optimizer_name(options_.optimizer.type), " is not supported there");
  std::vector<int64_t> numels;
  for (auto& b : buckets_) numels.push_back(b->stepped().size());
  nvme_ = std::make_unique<NvmeOptimizerSwapper>(options_.nvme_optimizer, comm_.rank(), numels,
                                                 std::vector<std::string>{"exp_avg", "exp_avg_sq"});
}

ShardedStep::~ShardedStep() = default;

namespace {

// The stepped range of each slot while its chunks stream (copy_masters_to_params,
// copy_params_to_masters, nvme_step): a slot is checked out at its first chunk and checked in when
// the next slot starts or close() runs, so a parameter shard on NVMe is in one host buffer at a
// time (core/zero/bucket.h: checkout_target).
class ChunkTargets {
 public:
  ChunkTargets(std::vector<std::unique_ptr<Bucket>>& buckets, bool read, bool written)
      : buckets_(buckets), read_(read), written_(written) {}
  // After an error mid-stream: the buffer goes back without writing (the file keeps its values).
  ~ChunkTargets() {
    if (open_ < 0) return;
    try {
      buckets_[static_cast<size_t>(open_)]->checkin_target(/*written=*/false);
    } catch (const std::exception&) {
    }
  }
  ChunkTargets(const ChunkTargets&) = delete;
  ChunkTargets& operator=(const ChunkTargets&) = delete;

  // The chunk's part of its slot's target, for use inside the chunk's callback.
  at::Tensor of(const NvmeOptimizerSwapper::Chunk& c) {
    if (open_ != static_cast<int64_t>(c.slot)) {
      close();
      target_ = buckets_[c.slot]->checkout_target(read_);
      open_ = static_cast<int64_t>(c.slot);
    }
    return target_.narrow(0, c.begin, c.numel);
  }
  // Checks the open slot in (written back when the stream writes).
  void close() {
    if (open_ < 0) return;
    const size_t slot = static_cast<size_t>(open_);
    open_ = -1;
    target_ = at::Tensor();
    buckets_[slot]->checkin_target(written_);
  }

 private:
  std::vector<std::unique_ptr<Bucket>>& buckets_;
  bool read_, written_;
  int64_t open_ = -1;
  at::Tensor target_;
};

}  // namespace

void ShardedStep::init_masters() {
  if (nvme_) {
    // Every chunk file gets its master from the parameters and zero state (Adam's initial m, v).
    nvme_->for_each_chunk(
        all_slots(),
        [&](NvmeOptimizerSwapper::Chunk& c) {
          c.master.copy_(buckets_[c.slot]->param_target().narrow(0, c.begin, c.numel));
          for (auto& s : c.states) s.zero_();
        },
        /*read=*/false, /*write_back=*/true);
    return;
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    // The stepped range: at stage 3 the resident shard (a released buffer holds no values).
    at::Tensor src = buckets_[b]->param_target();
    // The master's place follows the optimizer, never the shard's: the model's device (whose
    // fused optimizer spec_for chose, and where the gradients are), or the host with optimizer
    // offload. The parameters themselves are the master only when they are fp32 and live there
    // too; a shard offloaded to the host of a GPU model, or to a file, is not.
    const c10::Device where = master_device(compute_device(), options_.offload_optimizer);
    const bool separate = options_.compute_dtype != at::kFloat || src.device() != where ||
                          options_.offload_optimizer ||
                          options_.offload_param.device == ParamOffloadOptions::Device::kNvme;
    if (!separate) continue;
    if (where.is_cpu() && compute_device().is_cuda()) {
      // Page-locked when the model is on a GPU, so the copies can be asynchronous.
      slots_[b].master = pinned_host_copy(src, at::kFloat);
    } else {
      slots_[b].master = at::empty({src.numel()}, src.options().dtype(at::kFloat).device(where));
      slots_[b].master.copy_(src);
    }
  }
}

std::vector<size_t> ShardedStep::all_slots() const {
  std::vector<size_t> all(buckets_.size());
  for (size_t b = 0; b < all.size(); ++b) all[b] = b;
  return all;
}

at::Tensor ShardedStep::master(size_t b) const {
  ZT_CHECK(!nvme_, "the fp32 master of offload_optimizer.device nvme lives in files under ",
           options_.nvme_optimizer.path, "; it is streamed chunk by chunk, not held as a tensor");
  return slots_[b].master.defined() ? slots_[b].master : buckets_[b]->param_target();
}

void ShardedStep::copy_masters_to_params() {
  if (nvme_) {
    ChunkTargets targets(buckets_, /*read=*/false, /*written=*/true);
    nvme_->for_each_chunk(
        all_slots(), [&](NvmeOptimizerSwapper::Chunk& c) { targets.of(c).copy_(c.master); },
        /*read=*/true, /*write_back=*/false);
    targets.close();
    return;
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (!slots_[b].master.defined()) continue;
    buckets_[b]->checkout_target(/*read=*/false).copy_(slots_[b].master);
    buckets_[b]->checkin_target(/*written=*/true);
  }
}

void ShardedStep::copy_params_to_masters() {
  if (nvme_) {
    ChunkTargets targets(buckets_, /*read=*/true, /*written=*/false);
    nvme_->for_each_chunk(
        all_slots(), [&](NvmeOptimizerSwapper::Chunk& c) { c.master.copy_(targets.of(c)); },
        /*read=*/true, /*write_back=*/true);
    targets.close();
    return;
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (!slots_[b].master.defined()) continue;
    slots_[b].master.copy_(buckets_[b]->checkout_target(/*read=*/true));
    buckets_[b]->checkin_target(/*written=*/false);
  }
}

int64_t ShardedStep::optimizer_state_bytes() const {
  int64_t n = 0;
  for (const auto& s : slots_) n += s.optimizer->state_bytes();
  return n;
}

int64_t ShardedStep::master_bytes() const {
  int64_t n = 0;
  for (const auto& s : slots_) {
    if (s.master.defined()) n += s.master.numel() * s.master.element_size();
  }
  return n;
}

int64_t ShardedStep::nvme_bytes() const {
  return nvme_ ? nvme_->nvme_bytes() : 0;
}

int64_t ShardedStep::nvme_buffer_bytes() const {
  return nvme_ ? nvme_->buffer_bytes() : 0;
}

c10::Device ShardedStep::compute_device() const {
  return buckets_.empty() ? c10::Device(at::kCPU) : buckets_.front()->params().device();
}

std::vector<optim::GroupRange> ShardedStep::groups(size_t b, double lr, double grad_scale) const {
  // Padding belongs to no group and is never updated.
  const dist::Range r = buckets_[b]->stepped();
  std::vector<optim::GroupRange> ranges = optim::shard_group_ranges(
      slots_[b].grouping, slots_[b].params, r.begin, r.end, options_.hyper, lr);
  for (optim::GroupRange& g : ranges) g.hyper.grad_scale = grad_scale;
  return ranges;
}

double ShardedStep::global_grad_norm_squared() {
  // Per bucket the sum of squares, summed in float64 on the gradients' device, voted there, and
  // read back once. CPU fp32 (the common case) goes through optim::sum_of_squares, one
  // multi-threaded pass accumulating in float64; elsewhere an fp32 norm per bucket (LibTorch
  // reduces in a tree, so it stays accurate over millions of elements without a float64 copy).
  at::Tensor t = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(compute_device()));
  double host_sum = 0;
  for (auto& b : buckets_) {
    at::Tensor g = b->owned_grad();
    if (!g.defined() || g.numel() == 0) continue;
    if (g.is_cpu() && g.scalar_type() == at::kFloat) {
      host_sum += optim::sum_of_squares(g);
    } else {
      t.add_(
          at::linalg_vector_norm(g, 2, c10::nullopt, false, at::kFloat).to(at::kDouble).square());
    }
  }
  if (host_sum != 0) t.add_(host_sum);
  // Stage 0: every rank holds the whole reduced gradient.
  if (options_.stage == 0) return t.item<double>();
  return clock_.read<double>(comm_.all_reduce(t, dist::ReduceOp::kSum), t);
}

// Names of the parameters whose owned gradient holds inf/NaN on this rank.
std::string ShardedStep::overflow_culprits() const {
  std::string names;
  for (auto& b : buckets_) {
    at::Tensor g = b->owned_grad();
    if (!g.defined()) continue;
    const dist::Range view = b->stepped();
    for (const auto& e : b->layout().entries()) {
      dist::Range r = dist::intersect(e.range, view);
      if (r.empty()) continue;
      if (!g.narrow(0, r.begin - view.begin, r.size()).isfinite().all().item<bool>()) {
        names += (names.empty() ? "" : ", ") + e.name;
      }
    }
  }
  return names.empty() ? "none on this rank" : names;
}

StepOutcome ShardedStep::step(double lr, DynamicLossScaler* scaler, int64_t step_index) {
  at::NoGradGuard no_grad;
  StepOutcome out;
  // The rest of the average over ranks (each rank's loss is the mean over its micro-batch), in
  // fp16 the loss scale, and the clipping factor are never applied to the gradients: their
  // product goes to the optimizer as GroupHyper::grad_scale, which multiplies in its one pass.
  // What is left here is one read of the owned gradients: the global sum of squares of the raw
  // values. In fp16/bf16 that sum is also the overflow vote: an inf or NaN anywhere makes it
  // non-finite, and after the all-reduce (stages 1-3; at stage 0 every rank holds the same
  // reduced gradient) every rank sees the same verdict (DeepSpeed votes on the norm the same way,
  // CheckOverflow.check_using_norm).
  const double inv = post_reduce_scale_ / (scaler ? scaler->scale() : 1.0);
  const double raw_sq = global_grad_norm_squared();
  if (options_.compute_dtype == at::kFloat) {
    // No overflow vote in fp32 (as DeepSpeed): inf/NaN reach the optimizer.
  } else if (!std::isfinite(raw_sq)) {
    if (scaler) {
      if (scaler->at_minimum()) {
        ZT_THROW("fp16 loss scale collapsed: gradients overflow at step ", step_index,
                 " with the scale already at min_loss_scale ", scaler->scale(),
                 "; parameters with inf/NaN gradients: ", overflow_culprits(),
                 " (try bf16, a lower lr, or gradient_clipping)");
      }
      scaler->update(true);
    }
    out.skipped = true;
    return out;
  } else if (scaler) {
    scaler->update(false);
  }
  out.grad_norm = std::sqrt(raw_sq) * std::abs(inv);
  // Clips only a norm above the threshold (there clip_coefficient's factor is below 1). Without
  // the test, a norm at the threshold or up to 1e-6 under it would be scaled down too, and a NaN
  // norm (fp32 runs no overflow vote) would make every element's factor NaN instead of 1.
  double clip = 1.0;
  if (options_.gradient_clipping > 0 && out.grad_norm > options_.gradient_clipping) {
    clip = optim::clip_coefficient(out.grad_norm, options_.gradient_clipping);
  }
  const double grad_scale = inv * clip;
  if (nvme_) {
    nvme_step(grad_scale, lr);
    return out;
  }
  if (host_offload_) {
    offload_step(grad_scale, lr);
    return out;
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Slot& slot = slots_[b];
    at::Tensor g = buckets_[b]->owned_grad();
    if (!g.defined()) continue;
    const auto ranges = groups(b, lr, grad_scale);
    at::Tensor target = buckets_[b]->checkout_target(/*read=*/false);
    if (slot.master.defined()) {
      at::Tensor g32 = g.to(at::TensorOptions().dtype(at::kFloat).device(slot.master.device()));
      if (target.scalar_type() != at::kFloat && target.device() == slot.master.device()) {
        slot.optimizer->step(slot.master, g32, ranges, &target);  // 16-bit copy in the same pass
      } else {
        slot.optimizer->step(slot.master, g32, ranges);
        target.copy_(slot.master);
      }
    } else {
      at::Tensor g32 = g.scalar_type() == at::kFloat ? g : g.to(at::kFloat);
      slot.optimizer->step(target, g32, ranges);
    }
    buckets_[b]->checkin_target(/*written=*/true);
    buckets_[b]->publish_params(comm_, clock_);
  }
  return out;
}

// Optimizer offload with the model on a GPU (core/zero/host_offload.h): every owned gradient
// starts its copy to pinned host memory at once; each bucket is stepped on the host as soon as
// its copy landed, and its 16-bit parameters go back while the next bucket steps.
void ShardedStep::offload_step(double grad_scale, double lr) {
  std::vector<size_t> stepped;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    at::Tensor g = buckets_[b]->owned_grad();
    if (!g.defined()) continue;
    host_offload_->start_grad_copy(b, g.scalar_type() == at::kFloat ? g : g.to(at::kFloat));
    stepped.push_back(b);
  }
  for (size_t b : stepped) {
    Slot& slot = slots_[b];
    at::Tensor g32 = host_offload_->wait_grad(b);
    at::Tensor target = buckets_[b]->checkout_target(/*read=*/false);
    const auto ranges = groups(b, lr, grad_scale);
    if (target.is_cpu()) {
      // offload_param: the shard lives in host memory or a file, so the step writes it there.
      if (target.scalar_type() == at::kFloat) {
        slot.optimizer->step(slot.master, g32, ranges);
        target.copy_(slot.master);
      } else {
        slot.optimizer->step(slot.master, g32, ranges, &target);
      }
      buckets_[b]->checkin_target(/*written=*/true);
      continue;
    }
    if (target.scalar_type() == at::kFloat) {
      slot.optimizer->step(slot.master, g32, ranges);
      at::Tensor staging = host_offload_->param_staging(b, slot.master.numel(), at::kFloat);
      staging.copy_(slot.master);
    } else {
      at::Tensor staging =
          host_offload_->param_staging(b, slot.master.numel(), target.scalar_type());
      slot.optimizer->step(slot.master, g32, ranges, &staging);  // 16-bit copy in the same pass
    }
    host_offload_->start_param_copy(b, target);
  }
  host_offload_->finish();
  for (size_t b : stepped) buckets_[b]->publish_params(comm_, clock_);
}

// NVMe optimizer offload (core/zero/nvme_optimizer.h): the chunks of every stepped range stream
// through the swap buffers; each is stepped by its bucket's CpuAdam with the chunk's m and v
// loaded for the step and stored back after it, so the arithmetic per element is the same as a
// step over the whole range in host memory (bit for bit). With the model on a GPU each gradient
// chunk is copied to the host before its step and the updated parameters go back to the device
// shard after it (synchronous copies: the disk, not PCIe, sets the pace here); a shard in host
// memory or on NVMe (offload_param) takes the 16-bit copy straight from the optimizer's pass.
void ShardedStep::nvme_step(double grad_scale, double lr) {
  std::vector<size_t> stepped;
  std::vector<int64_t> step_before(buckets_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    at::Tensor g = buckets_[b]->owned_grad();
    if (!g.defined()) continue;
    stepped.push_back(b);
    step_before[b] = slots_[b].optimizer->step_count();
  }
  auto step_tensor = [](int64_t n) { return at::scalar_tensor(n, at::kLong); };
  const at::TensorOptions host_float = at::TensorOptions().dtype(at::kFloat).device(at::kCPU);
  // An I/O error on one rank stops every rank: the ranks vote before anything is published, so
  // none waits in a collective for a rank that left.
  std::string failure;
  try {
    ChunkTargets targets(buckets_, /*read=*/false, /*written=*/true);
    nvme_->for_each_chunk(
        stepped,
        [&](NvmeOptimizerSwapper::Chunk& c) {
          Slot& slot = slots_[c.slot];
          at::Tensor g = buckets_[c.slot]->owned_grad().narrow(0, c.begin, c.numel);
          // CpuAdam steps the host chunk: a GPU model's gradient chunk comes to the host first.
          at::Tensor g32 = g.is_cpu() && g.scalar_type() == at::kFloat ? g : g.to(host_float);
          // The bucket's group ranges, cut to the chunk and shifted to its coordinates.
          std::vector<optim::GroupRange> ranges;
          for (optim::GroupRange r : groups(c.slot, lr, grad_scale)) {
            r.begin = std::max(r.begin, c.begin) - c.begin;
            r.end = std::min(r.end, c.begin + c.numel) - c.begin;
            if (r.begin < r.end) ranges.push_back(r);
          }
          // CpuAdam steps the chunk's m and v where they lie in the swap buffer (no copy in or
          // out); a wrapper (SWA) loads copies. Either way the optimizer lets go of them after
          // the chunk, so it never holds more than one chunk's state.
          auto* adam = dynamic_cast<optim::CpuAdam*>(slot.optimizer.get());
          const at::Tensor step_now = step_tensor(step_before[c.slot]);
          if (adam) {
            adam->load_state_dict({{"step", step_now}});
            adam->adopt_state(c.states[0], c.states[1]);
          } else {
            slot.optimizer->load_state_dict(
                {{"step", step_now}, {"exp_avg", c.states[0]}, {"exp_avg_sq", c.states[1]}});
          }
          at::Tensor target = targets.of(c);
          if (target.scalar_type() != at::kFloat && target.is_cpu()) {
            slot.optimizer->step(c.master, g32, ranges, &target);
          } else {
            slot.optimizer->step(c.master, g32, ranges);
            target.copy_(c.master);
          }
          if (!adam) {
            const auto state = slot.optimizer->state_dict();
            c.states[0].copy_(state.at("exp_avg"));
            c.states[1].copy_(state.at("exp_avg_sq"));
          }
          slot.optimizer->load_state_dict({{"step", step_now}});
        },
        /*read=*/true, /*write_back=*/true);
    targets.close();
  } catch (const Error& e) {
    failure = e.message();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  at::Tensor failed = at::full({1}, failure.empty() ? 0 : 1,
                               at::TensorOptions().dtype(at::kInt).device(comm_.device()));
  const int any_failed = clock_.read<int>(comm_.all_reduce(failed, dist::ReduceOp::kMax), failed);
  ZT_CHECK(failure.empty(), failure,
           "; the NVMe optimizer state is inconsistent now: resume from the last checkpoint");
  ZT_CHECK(any_failed == 0,
           "NVMe optimizer offload: an I/O error on another rank stopped the step (its message "
           "names the file and offset); resume from the last checkpoint");
  // The optimizers keep only their step counts between steps.
  for (size_t b : stepped) {
    slots_[b].optimizer->load_state_dict({{"step", step_tensor(step_before[b] + 1)}});
  }
  for (size_t b : stepped) buckets_[b]->publish_params(comm_, clock_);
}

}  // namespace zt::zero
