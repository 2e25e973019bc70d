#include "core/zero/sharded_step.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "base/error.h"
#include "base/logging.h"
#include "core/precision/overflow_vote.h"
#include "core/zero/host_offload.h"
#include "core/zero/serial_worker.h"
#include "optim/clip.h"

namespace zt::zero {

ShardedStep::ShardedStep(const EngineOptions& options,
                         std::vector<std::unique_ptr<Bucket>>& buckets, dist::Communicator& comm,
                         dist::Communicator* replica, int world_rank, WaitClock& clock,
                         double post_reduce_scale, bool spill_grads)
    : options_(options),
      buckets_(buckets),
      comm_(comm),
      replica_(replica),
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
      options_.optimizer, master_device(compute_device(), options_.optimizer_offloaded()));
  optimizer_kind_ = spec.type;
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
  // NVMe optimizer offload steps CpuAdam on host chunks: its update is elementwise (a chunk
  // boundary changes no bit, optim/cpu_adam_kernel.h) and its state is exp_avg and exp_avg_sq
  // laid out like the master, which the store then holds.
  std::vector<std::string> store_states;
  if (options_.optimizer_on_nvme()) {
    ZT_CHECK(spec.type == optim::OptimizerKind::kCpuAdam,
             "zero_optimization.offload_optimizer.device nvme steps with CPUAdam (optimizer type "
             "Adam or AdamW); optimizer ",
             optim::optimizer_name(options_.optimizer.type), " is not supported there");
    ZT_CHECK(!options_.optimizer.swa.enabled,
             "swa: the average is laid out like the whole fp32 master in memory, which "
             "zero_optimization.offload_optimizer.device nvme streams chunk by chunk");
    store_states = {"exp_avg", "exp_avg_sq"};
  }
  // A bf16 master is stepped a piece at a time in fp32 (step_widened()): the store holds
  // Adam's moments beside it, in their own dtype, and hands them to the optimizer piece by piece
  // (check_engine_options allows only Adam and AdamW here).
  if (options_.master_dtype != at::kFloat) store_states = {"exp_avg", "exp_avg_sq"};
  ZT_INTERNAL_ASSERT(!spill_grads || replica_ == nullptr,
                     "spilled gradients are not summed across MiCS replicas");
  store_ = make_master_store(options_, buckets_, world_rank, std::move(store_states), spill_grads);
  if (GradSpill* spill = store_->grad_spill()) {
    for (size_t b = 0; b < buckets_.size(); ++b) buckets_[b]->spill_grads_to(spill, b);
  }
  step_grads_ = make_step_gradients(
      spec, options_, buckets_, comm_, clock_,
      [this](size_t b) -> optim::ShardOptimizer& { return *slots_[b].optimizer; },
      store_->device());
  if (store_->device().is_cpu() && !compute_device().is_cpu() && !store_->holds_state()) {
    host_offload_ = std::make_unique<HostOffload>(compute_device(), buckets_.size());
  }
}

ShardedStep::~ShardedStep() = default;

namespace {

// The stepped range of each slot while its chunks stream (the step, copy_masters_to_params,
// copy_params_to_masters): a slot is checked out at its first chunk and checked in when the next
// slot starts or close() runs, so a parameter shard on NVMe is in one host buffer at a time
// (core/zero/bucket.h: checkout_target).
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
  at::Tensor of(const MasterChunk& c) {
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
  store_->init();
}

void ShardedStep::copy_masters_to_params() {
  ChunkTargets targets(buckets_, /*read=*/false, /*written=*/true);
  store_->for_each_chunk(
      store_->all_slots(), [&](MasterChunk& c) { targets.of(c).copy_(c.master); },
      /*read=*/true, /*write_back=*/false);
  targets.close();
}

void ShardedStep::copy_params_to_masters() {
  ChunkTargets targets(buckets_, /*read=*/true, /*written=*/false);
  store_->for_each_chunk(
      store_->all_slots(), [&](MasterChunk& c) { c.master.copy_(targets.of(c)); },
      /*read=*/true, /*write_back=*/true);
  targets.close();
}

int64_t ShardedStep::optimizer_state_bytes() const {
  int64_t n = store_->state_bytes();
  for (const auto& s : slots_) n += s.optimizer->state_bytes();
  return n;
}

int64_t ShardedStep::master_bytes() const {
  return store_->master_bytes();
}

int64_t ShardedStep::nvme_bytes() const {
  return store_->nvme_bytes();
}

int64_t ShardedStep::nvme_buffer_bytes() const {
  return store_->buffer_bytes();
}

c10::Device ShardedStep::compute_device() const {
  return buckets_.empty() ? c10::Device(at::kCPU) : buckets_.front()->params().device();
}

std::vector<optim::GroupRange> ShardedStep::groups(size_t b, const optim::GroupHyper& hyper,
                                                   double grad_scale) const {
  // Padding belongs to no group and is never updated.
  const dist::Range r = buckets_[b]->stepped();
  std::vector<optim::GroupRange> ranges = optim::shard_group_ranges(
      slots_[b].grouping, slots_[b].params, r.begin, r.end, hyper, hyper.lr);
  for (optim::GroupRange& g : ranges) g.hyper.grad_scale = grad_scale;
  return step_grads_->ranges(b, std::move(ranges));
}

// MiCS's hierarchical reduction: each micro-step reduce-scattered the gradients within the shard
// group (Bucket::start_grad_sync); the sum over the other groups is taken once per step, on the
// owned slices only, so with gradient accumulation the slow link carries it once per window
// (DeepSpeed's MiCS_Optimizer.allreduce_mics_shard_grads runs on the accumulation boundary too).
// Every replica then holds the same summed gradient and steps the same master.
void ShardedStep::reduce_across_replicas() {
  std::vector<dist::WorkPtr> works;
  for (auto& b : buckets_) {
    at::Tensor g = b->owned_grad();
    if (g.defined() && g.numel() > 0) works.push_back(replica_->all_reduce(g));
  }
  for (auto& w : works) clock_.wait(w);
}

// Under expert parallelism the ranks of an expert group hold the same replicated parameters (the
// buckets are laid out alike on each: the experts' slices have the same sizes) but computed their
// gradients from different tokens, and the engine's reductions ran over this expert index's ranks
// only. The rest of the sum is taken here, on the owned ranges of the replicated entries, packed
// into one buffer per step; an expert's slice is this index's alone and stays as it is.
void ShardedStep::reduce_replicated_over_split() {
  std::vector<at::Tensor> views;
  for (auto& b : buckets_) {
    at::Tensor g = b->owned_grad();
    if (!g.defined() || g.numel() == 0) continue;
    const dist::Range view = b->stepped();
    for (const auto& e : b->layout().entries()) {
      if (tensor_split_.count(e.name)) continue;
      const dist::Range r = dist::intersect(e.range, view);
      if (!r.empty()) views.push_back(g.narrow(0, r.begin - view.begin, r.size()));
    }
  }
  if (views.empty()) return;
  at::Tensor packed = at::cat(views);
  at::Tensor on_group = packed.to(tensor_->device());
  clock_.wait(tensor_->all_reduce(on_group));
  packed = on_group.to(packed.device());
  int64_t at = 0;
  for (at::Tensor& v : views) {
    v.copy_(packed.narrow(0, at, v.numel()));
    at += v.numel();
  }
}

double ShardedStep::global_grad_norm_squared() {
  // Per bucket the sum of squares, summed in float64 on the gradients' device, voted there, and
  // read back once. CPU fp32 (the common case) goes through optim::sum_of_squares, one
  // multi-threaded pass accumulating in float64; elsewhere an fp32 norm per bucket (LibTorch
  // reduces in a tree, so it stays accurate over millions of elements without a float64 copy).
  at::Tensor t = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(compute_device()));
  double host_sum = 0;
  for (auto& b : buckets_) {
    // A host gradient's sum comes from grad_sum_of_squares: for a spilled one, taken as it was
    // written; fp32 ones add up in float64 on the host, the others in t, in bucket order.
    std::optional<double> host = b->spilled_grad_squares();
    if (!host) {
      at::Tensor g = b->owned_grad();
      if (!g.defined() || g.numel() == 0) continue;
      if (!g.is_cpu()) {
        t.add_(
            at::linalg_vector_norm(g, 2, c10::nullopt, false, at::kFloat).to(at::kDouble).square());
        continue;
      }
      host = grad_sum_of_squares(g);
    }
    if (options_.grad_accum_dtype == at::kFloat) {
      host_sum += *host;
    } else {
      t.add_(*host);
    }
  }
  if (host_sum != 0) t.add_(host_sum);
  if (tensor_) t = tensor_sum_of_squares(t);
  if (steps_whole_buffers(buckets_)) return t.item<double>();
  return clock_.read<double>(comm_.all_reduce(t, dist::ReduceOp::kSum), t);
}

bool ShardedStep::downloads_at_reduction() const {
  return host_offload_ != nullptr && replica_ == nullptr &&
         !(tensor_ != nullptr && replicated_differ_) && store_->grad_spill() == nullptr &&
         step_grads_->final_at_reduction();
}

bool ShardedStep::steps_at_reduction() const {
  // Nothing in the step may depend on another bucket's gradient: no overflow vote, no clipping
  // (the reported norm is still taken in step()), and the step of one bucket must be CpuAdam's
  // elementwise pass on an fp32 master the optimizer holds in memory. Stage 3 always votes
  // (core/precision/overflow_vote.h), so this is stages 1-2.
  return downloads_at_reduction() && !skips_nonfinite_steps(options_) &&
         options_.gradient_clipping == 0 && options_.stage <= 2 &&
         optimizer_kind_ == optim::OptimizerKind::kCpuAdam && !options_.optimizer.swa.enabled &&
         options_.master_dtype == at::kFloat && store_->state_names().empty() &&
         store_->swap_directory().empty();
}

void ShardedStep::gradient_reduced(size_t b, const optim::GroupHyper& hyper) {
  if (!downloads_at_reduction()) return;
  at::NoGradGuard no_grad;
  const at::Tensor g = step_grads_->gradient(b);
  // A 16-bit gradient (grad_accum_dtype) goes over widened, and widened now its fp32 copy would
  // sit on the device beside the activations: it waits for the step. So does a bucket that no
  // gradient reached (the step does not step it).
  if (!g.defined() || g.scalar_type() != at::kFloat) return;
  host_offload_->start_grad_copy(b, g);
  if (downloading_.size() < buckets_.size()) downloading_.resize(buckets_.size(), false);
  downloading_[b] = true;
  if (!steps_at_reduction()) return;
  if (stepped_early_.size() < buckets_.size()) stepped_early_.resize(buckets_.size(), false);
  if (stepped_early_[b]) return;
  stepped_early_[b] = true;
  // What step() would step this bucket with: no loss scale (no vote means no fp16), no clipping.
  std::vector<optim::GroupRange> ranges = groups(b, hyper, step_grads_->factor(post_reduce_scale_));
  const int64_t step_before = slots_[b].optimizer->step_count();
  if (!early_) early_ = std::make_unique<SerialWorker>();
  early_->post([this, b, ranges = std::move(ranges), step_before] {
    at::NoGradGuard no_grad_here;  // grad mode is per thread
    ChunkTargets targets(buckets_, /*read=*/false, /*written=*/true);
    store_->for_each_chunk(
        {b}, [&](MasterChunk& c) { step_chunk(c, targets.of(c), ranges, step_before); },
        /*read=*/true, /*write_back=*/true);
    targets.close();
  });
}

void ShardedStep::abandon_reductions() {
  if (early_) {
    try {
      early_->wait_idle();
    } catch (const std::exception&) {
    }
  }
  if (host_offload_) {
    host_offload_->order_after_grad_copies();
    host_offload_->finish();
  }
  downloading_.assign(downloading_.size(), false);
  stepped_early_.assign(stepped_early_.size(), false);
}

void ShardedStep::set_split_group(dist::Communicator* split, bool replicated_differ) {
  ZT_INTERNAL_ASSERT(store_->grad_spill() == nullptr,
                     "spilled gradients are not summed over a tensor or expert split");
  tensor_ = split;
  replicated_differ_ = replicated_differ;
  tensor_split_.clear();
  for (const auto& kv : options_.tensor_split_params) tensor_split_.insert(kv.first);
  tensor_split_.insert(options_.dealt_params.begin(), options_.dealt_params.end());
}

// The sum of squares over the tensor group: the slices of split parameters add up, while a
// replicated parameter, the same on every rank of the group, is counted 1/tp on each, so once in
// the sum. `whole` is this rank's unweighted sum; the replicated part is taken from it.
at::Tensor ShardedStep::tensor_sum_of_squares(const at::Tensor& whole) {
  double split = 0;
  for (auto& b : buckets_) {
    at::Tensor g = b->owned_grad();
    if (!g.defined() || g.numel() == 0) continue;
    const dist::Range view = b->stepped();
    for (const auto& e : b->layout().entries()) {
      if (!tensor_split_.count(e.name)) continue;
      dist::Range r = dist::intersect(e.range, view);
      if (r.empty()) continue;
      split += at::linalg_vector_norm(g.narrow(0, r.begin - view.begin, r.size()), 2, c10::nullopt,
                                      false, at::kDouble)
                   .square()
                   .item<double>();
    }
  }
  const double tp = tensor_->size();
  at::Tensor t = whole.clone();
  t.mul_(1.0 / tp).add_(split * (1.0 - 1.0 / tp));
  at::Tensor on_group = t.to(tensor_->device());
  tensor_->all_reduce(on_group)->wait();
  return on_group.to(whole.device());
}

// Names of the parameters whose owned gradient holds inf/NaN on this rank.
std::string ShardedStep::overflow_culprits() const {
  std::string names;
  for (auto& b : buckets_) {
    at::Tensor g = b->load_owned_grad();
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

StepOutcome ShardedStep::step(const optim::GroupHyper& hyper, DynamicLossScaler* scaler,
                              int64_t step_index) {
  at::NoGradGuard no_grad;
  StepOutcome out;
  // The buckets stepped at their reduction are done before anything reads the masters.
  if (early_) early_->wait_idle();
  // The rest of the average over ranks (each rank's loss is the mean over its micro-batch), in
  // fp16 the loss scale, and the clipping factor are never applied to the gradients: their
  // product goes to the optimizer as GroupHyper::grad_scale, which multiplies in its one pass.
  // What is left here is one read of the owned gradients: the global sum of squares of the raw
  // values. Where a step with inf/NaN gradients is skipped (core/precision/overflow_vote.h) that
  // sum is also the overflow vote: an inf or NaN anywhere makes it non-finite, and after the
  // all-reduce (stages 1-3; at stage 0 every rank holds the same reduced gradient) every rank sees
  // the same verdict (DeepSpeed votes on the norm the same way).
  const double inv = post_reduce_scale_ / (scaler ? scaler->scale() : 1.0);
  if (replica_ != nullptr) reduce_across_replicas();
  if (tensor_ != nullptr && replicated_differ_) reduce_replicated_over_split();
  // Without the vote, the raw sum is needed only where the norm is taken from it.
  const bool vote = skips_nonfinite_steps(options_);
  const double raw_sq =
      vote || step_grads_->norm_needs_raw_sum() ? global_grad_norm_squared() : 0.0;
  if (!vote) {
    // inf/NaN reach the optimizer, as they do under DeepSpeed there.
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
    if (host_offload_) host_offload_->order_after_grad_copies();
    downloading_.assign(downloading_.size(), false);
    return out;
  } else if (scaler) {
    scaler->update(false);
  }
  std::vector<size_t> stepped;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (buckets_[b]->has_grad()) stepped.push_back(b);
  }
  out.grad_norm = step_grads_->prepare(stepped, inv, raw_sq);
  // Clips only a norm above the threshold (there clip_coefficient's factor is below 1). Without
  // the test, a norm at the threshold or up to 1e-6 under it would be scaled down too, and a NaN
  // norm (where no vote skipped the step) would make every element's factor NaN instead of 1.
  double clip = 1.0;
  if (options_.gradient_clipping > 0 && out.grad_norm > options_.gradient_clipping) {
    clip = optim::clip_coefficient(out.grad_norm, options_.gradient_clipping);
  }
  const double grad_scale = step_grads_->factor(inv) * clip;
  update(stepped, grad_scale, hyper);
  step_grads_->release();
  return out;
}

// A 16-bit master (bf16.bf16_master_weights_and_grads), with its moments in the store (fp32 or
// bf16): DeepSpeed's CPUAdam reads each element as fp32, updates in fp32 and stores it rounded to
// nearest even. Here a piece of kWidenPiece elements at a time: master, moments and gradient
// widened to fp32 temporaries (exact), the optimizer's fp32 pass on them, the results rounded
// back into the store (copy_ rounds to nearest even) and the master copied into the bucket's
// target (a bf16 parameter shard: the same bits). Memory: four fp32 temporaries of one piece.
void ShardedStep::step_widened(MasterChunk& c, optim::ShardOptimizer& opt, const at::Tensor& grad,
                               const std::vector<optim::GroupRange>& bucket_ranges,
                               int64_t step_before, const at::Tensor& target) {
  const std::vector<std::string>& names = store_->state_names();
  ZT_INTERNAL_ASSERT(names.size() == c.states.size(), "a 16-bit master needs its moments");
  const bool target_is_master = target.data_ptr() == c.master.data_ptr();
  const at::TensorOptions fp32 = c.master.options().dtype(at::kFloat);
  for (int64_t at = 0; at < c.numel; at += kWidenPiece) {
    const int64_t n = std::min(kWidenPiece, c.numel - at);
    std::vector<optim::GroupRange> ranges;
    for (optim::GroupRange r : bucket_ranges) {
      r.begin = std::max(r.begin, c.begin + at) - (c.begin + at);
      r.end = std::min(r.end, c.begin + at + n) - (c.begin + at);
      if (r.begin < r.end) ranges.push_back(r);
    }
    at::Tensor master = c.master.narrow(0, at, n);
    if (ranges.empty()) {  // padding only: nothing is stepped, the target still gets the values
      if (!target_is_master) target.narrow(0, at, n).copy_(master);
      continue;
    }
    at::Tensor m32 = master.to(fp32, /*non_blocking=*/false, /*copy=*/true);
    std::map<std::string, at::Tensor> state;
    std::vector<at::Tensor> wide(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      wide[i] = c.states[i].narrow(0, at, n).to(fp32, false, /*copy=*/true);
      state[names[i]] = wide[i];
    }
    opt.load_state_dict({{"step", at::scalar_tensor(step_before, at::kLong)}});
    const bool in_place = opt.adopt_state(state);
    at::Tensor g32 = grad.narrow(0, at, n).to(fp32);
    opt.step(m32, g32, ranges);
    if (!in_place) {
      const auto updated = opt.state_dict();
      for (size_t i = 0; i < names.size(); ++i) wide[i] = updated.at(names[i]);
    }
    master.copy_(m32);
    for (size_t i = 0; i < names.size(); ++i) c.states[i].narrow(0, at, n).copy_(wide[i]);
    if (!target_is_master) target.narrow(0, at, n).copy_(master);
  }
  opt.load_state_dict({{"step", at::scalar_tensor(step_before, at::kLong)}});
}

// One chunk of the step: the chunk's gradient on the master's device (a GPU model's gradients
// with a host master come through pinned buffers; a chunk streamed from NVMe brings its own), the
// optimizer on the chunk with its state (the store's chunk views, or the optimizer's own), and the
// updated values into `target` (the chunk's part of its bucket's stepped range): in the
// optimizer's pass where the target is a 16-bit tensor beside the master, else copied (to a GPU
// through a pinned staging buffer and the side stream).
void ShardedStep::step_chunk(MasterChunk& c, const at::Tensor& target,
                             const std::vector<optim::GroupRange>& bucket_ranges,
                             int64_t step_before) {
  const std::vector<std::string>& names = store_->state_names();
  auto step_tensor = [](int64_t n) { return at::scalar_tensor(n, at::kLong); };
  Slot& slot = slots_[c.slot];
  // The chunk's gradient: brought with it from the files where it was spilled, else a slice of
  // the bucket's.
  at::Tensor g = c.grad.defined() ? c.grad
                 : host_offload_  ? host_offload_->wait_grad(c.slot).narrow(0, c.begin, c.numel)
                                  : step_grads_->gradient(c.slot).narrow(0, c.begin, c.numel);
  if (c.master.scalar_type() != at::kFloat) {
    step_widened(c, *slot.optimizer, g, bucket_ranges, step_before, target);
    return;
  }
  at::Tensor g32 = g.to(at::TensorOptions().dtype(at::kFloat).device(c.master.device()));
  // The bucket's group ranges, cut to the chunk and shifted to its coordinates.
  std::vector<optim::GroupRange> ranges;
  for (optim::GroupRange r : bucket_ranges) {
    r.begin = std::max(r.begin, c.begin) - c.begin;
    r.end = std::min(r.end, c.begin + c.numel) - c.begin;
    if (r.begin < r.end) ranges.push_back(r);
  }
  // State the store holds is the optimizer's for this chunk only: CpuAdam steps it where it
  // lies (no copy in or out), another optimizer loads copies that go back after the step.
  // Either way the optimizer lets go of it after the chunk.
  bool in_place = true;
  if (!names.empty()) {
    slot.optimizer->load_state_dict({{"step", step_tensor(step_before)}});
    std::map<std::string, at::Tensor> state;
    for (size_t i = 0; i < names.size(); ++i) state[names[i]] = c.states[i];
    in_place = slot.optimizer->adopt_state(state);
  }
  const bool to_gpu = host_offload_ && !target.is_cpu();
  at::Tensor out =
      to_gpu ? host_offload_->param_staging(c.slot, c.numel, target.scalar_type()) : target;
  if (out.scalar_type() == at::kFloat && out.data_ptr() == c.master.data_ptr()) {
    slot.optimizer->step(c.master, g32, ranges);  // the fp32 parameters are the master
  } else if (out.scalar_type() != at::kFloat && out.device() == c.master.device()) {
    slot.optimizer->step(c.master, g32, ranges, &out);  // 16-bit copy in the same pass
  } else {
    slot.optimizer->step(c.master, g32, ranges);
    out.copy_(c.master);
  }
  if (to_gpu) {
    at::Tensor device_target = target;
    host_offload_->start_param_copy(c.slot, device_target);
  }
  if (!names.empty()) {
    if (!in_place) {
      const auto state = slot.optimizer->state_dict();
      for (size_t i = 0; i < names.size(); ++i) c.states[i].copy_(state.at(names[i]));
    }
    slot.optimizer->load_state_dict({{"step", step_tensor(step_before)}});
  }
}

// The one step loop: step_chunk() per chunk of the master store (a GPU model's gradient copies to
// a host master all started up front; a chunk streamed from NVMe takes a synchronous copy, as
// there the disk sets the pace), then the parameters published. Buckets stepped at their
// reduction (steps_at_reduction()) are only published. Chunking changes no bit: the optimizer
// that steps chunks (CpuAdam) updates each element on its own.
void ShardedStep::update(const std::vector<size_t>& stepped, double grad_scale,
                         const optim::GroupHyper& hyper) {
  std::vector<size_t> pending;
  for (size_t b : stepped) {
    if (b >= stepped_early_.size() || !stepped_early_[b]) pending.push_back(b);
  }
  stepped_early_.assign(stepped_early_.size(), false);
  if (host_offload_) {
    for (size_t b : pending) {
      if (b < downloading_.size() && downloading_[b]) continue;  // started by gradient_reduced
      at::Tensor g = step_grads_->gradient(b);
      host_offload_->start_grad_copy(b, g.scalar_type() == at::kFloat ? g : g.to(at::kFloat));
    }
    downloading_.assign(downloading_.size(), false);
  }
  const std::vector<std::string>& names = store_->state_names();
  std::vector<int64_t> step_before(buckets_.size(), 0);
  // Each bucket's group ranges once per step, not once per chunk.
  std::vector<std::vector<optim::GroupRange>> bucket_ranges(buckets_.size());
  for (size_t b : stepped) step_before[b] = slots_[b].optimizer->step_count();
  for (size_t b : pending) bucket_ranges[b] = groups(b, hyper, grad_scale);
  auto step_tensor = [](int64_t n) { return at::scalar_tensor(n, at::kLong); };
  auto run = [&] {
    ChunkTargets targets(buckets_, /*read=*/false, /*written=*/true);
    store_->for_each_chunk(
        pending,
        [&](MasterChunk& c) {
          step_chunk(c, targets.of(c), bucket_ranges[c.slot], step_before[c.slot]);
        },
        /*read=*/true,
        /*write_back=*/true, /*with_grads=*/store_->grad_spill() != nullptr);
    targets.close();
  };
  if (store_->swap_directory().empty()) {
    run();
  } else {
    // An I/O error on one rank stops every rank: the ranks vote before anything is published, so
    // none waits in a collective for a rank that left.
    std::string failure;
    try {
      run();
    } catch (const Error& e) {
      failure = e.message();
    } catch (const std::exception& e) {
      failure = e.what();
    }
    at::Tensor failed = at::full({1}, failure.empty() ? 0 : 1,
                                 at::TensorOptions().dtype(at::kInt).device(comm_.device()));
    // Over the shard group, then across the replicas: every rank of the job sees the verdict.
    dist::WorkPtr vote = comm_.all_reduce(failed, dist::ReduceOp::kMax);
    for (dist::Communicator* other : {replica_, tensor_}) {
      if (other == nullptr) continue;
      clock_.wait(vote);
      vote = other->all_reduce(failed, dist::ReduceOp::kMax);
    }
    const int any_failed = clock_.read<int>(vote, failed);
    ZT_CHECK(failure.empty(), failure,
             "; the NVMe optimizer state is inconsistent now: resume from the last checkpoint");
    ZT_CHECK(any_failed == 0,
             "NVMe optimizer offload: an I/O error on another rank stopped the step (its message "
             "names the file and offset); resume from the last checkpoint");
  }
  if (host_offload_) host_offload_->finish();
  // With the state in the store, the optimizers keep only their step counts between steps.
  if (!names.empty()) {
    for (size_t b : stepped) {
      slots_[b].optimizer->load_state_dict({{"step", step_tensor(step_before[b] + 1)}});
    }
  }
  for (size_t b : stepped) buckets_[b]->publish_params(comm_, clock_);
}

}  // namespace zt::zero
