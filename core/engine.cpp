#include "core/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "core/base/error.h"
#include "core/base/logging.h"
#include "core/cuda_plugin.h"
#include "core/zero/host_offload.h"
#include "core/precision/overflow_check.h"
#include "core/zero/call_unit.h"
#include "optim/fused_adam_launch.h"
#include "parallel/flat_buffer.h"

namespace zt {

// One flat buffer (bucket) of trainable parameters. Shapes:
//   param_flat  (padded,) D   parameters are views of it; stage 3: storage released between uses
//   param_shard (shard,)  D   stage 3 only: this rank's slice, always resident
//   grad_full   (padded,) A   stage 0/1: accumulation of the full gradient
//   grad_shard  (shard,)  A   stage 2/3: accumulation of this rank's reduced slice
//   staging     (padded,) A   stage 2/3: this micro-step's gradients until reduce-scattered
//   master      fp32          separate master (offload or 16-bit compute); else undefined
struct Engine::Buffer {
  dist::FlatLayout layout;
  size_t unit = 0;
  bool persistent = false;  // stage 3: never released (small buffers)
  at::Tensor param_flat, param_shard, grad_full, grad_shard, staging, reduced, master;
  std::unique_ptr<optim::ShardOptimizer> optimizer;
  std::vector<bool> no_decay;   // per entry
  int pending = 0;              // parameters of this micro-step still without gradient
  bool launched = false;        // reduction of this micro-step started
  bool shard_has_grad = false;  // grad_shard holds gradients of this window
  // Stage 3 state of param_flat.
  bool gathered = true;
  dist::WorkPtr gather_work;
  at::Tensor gather_src;

  explicit Buffer(dist::FlatLayout l) : layout(std::move(l)) {}
};

struct Engine::Unit {
  std::string name;  // "" for the root unit
  const torch::nn::Module* module = nullptr;
  std::vector<size_t> buffers;
  std::vector<std::pair<std::string, at::Tensor>> params;
  std::unique_ptr<UnitHooks> hooks;
};

namespace {

int64_t element_size(at::ScalarType t) {
  return static_cast<int64_t>(c10::elementSize(t));
}

void release_storage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

void refill_storage(const at::Tensor& t, size_t nbytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}

bool matches_any(const std::string& name, const std::vector<std::string>& patterns) {
  for (const auto& p : patterns) {
    if (!p.empty() && name.find(p) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

// Runs after autograd has accumulated a parameter's gradient of this backward.
class Engine::GradHook : public torch::autograd::PostAccumulateGradHook {
 public:
  GradHook(Engine* engine, size_t buffer, size_t entry)
      : engine_(engine), buffer_(buffer), entry_(entry) {}
  void operator()(const torch::autograd::Variable& param) override {
    engine_->on_grad_ready(buffer_, entry_, param);
  }

 private:
  Engine* engine_;
  size_t buffer_, entry_;
};

class Engine::UnitHooksImpl : public UnitHooks {
 public:
  UnitHooksImpl(Engine* engine, size_t unit) : engine_(engine), unit_(unit) {}
  void before_forward() override {
    engine_->gather_unit(unit_, /*wait=*/true);
    engine_->prefetch_after(unit_, +1);
  }
  void after_forward(const at::Tensor& output) override {
    Engine* engine = engine_;
    size_t unit = unit_;
    if (at::GradMode::is_enabled() && output.requires_grad()) {
      // Fires when the gradient w.r.t. the unit's output is known, i.e. just before the unit's
      // own backward: gather its parameters again and prefetch the unit before it.
      output.register_hook([engine, unit](const at::Tensor& grad) {
        engine->gather_unit(unit, /*wait=*/true);
        engine->prefetch_after(unit, -1);
        return grad;
      });
    }
    if (engine->gathered_scopes_ == 0) engine->release_unit(unit);
  }

 private:
  Engine* engine_;
  size_t unit_;
};

Engine::Engine(std::shared_ptr<torch::nn::Module> model, EngineOptions options,
               std::shared_ptr<dist::Communicator> comm)
    : model_(std::move(model)), options_(std::move(options)), comm_(std::move(comm)) {
  ZT_CHECK(model_ != nullptr, "Engine: model is null");
  ZT_CHECK(comm_ != nullptr, "Engine: communicator is null");
  ZT_CHECK(options_.stage >= 0 && options_.stage <= 3, "zero_optimization.stage must be 0..3, got ",
           options_.stage);
  ZT_CHECK(options_.gradient_accumulation_steps >= 1,
           "gradient_accumulation_steps must be >= 1, got ", options_.gradient_accumulation_steps);
  ZT_CHECK(options_.gradient_clipping >= 0, "gradient_clipping must be >= 0, got ",
           options_.gradient_clipping);
  ZT_CHECK(options_.grad_accum_dtype == at::kFloat || options_.grad_accum_dtype == at::kBFloat16 ||
               options_.grad_accum_dtype == at::kHalf,
           "data_types.grad_accum_dtype must be fp32, fp16 or bf16, got ",
           options_.grad_accum_dtype, " (", static_cast<int>(options_.grad_accum_dtype), ")");
  const at::ScalarType cd = options_.compute_dtype;
  ZT_CHECK(cd == at::kFloat || cd == at::kHalf || cd == at::kBFloat16,
           "engine compute dtype must be fp32, fp16 or bf16, got ", cd);
  if (cd == at::kHalf) scaler_ = std::make_unique<DynamicLossScaler>(options_.fp16);
  rank_ = comm_->rank();
  world_ = comm_->size();
  build_units();
  build_buffers();
  broadcast_initial_state();
  cast_model_to_compute_dtype();
  install_grad_hooks();
  if (options_.offload_optimizer && !buffers_.empty() && buffers_.front()->param_flat.is_cuda()) {
    host_offload_ = std::make_unique<HostOffload>(buffers_.front()->param_flat.device());
  }
  MemoryReport m = memory();
  ZT_LOG_INFO("engine: ZeRO stage ", options_.stage, ", ", world_, " rank(s), ", buffers_.size(),
              " flat buffer(s) in ", units_.size(), " unit(s); model states per rank: params ",
              m.param_bytes, " B, grads ", m.grad_bytes, " B, optimizer ",
              m.optimizer_state_bytes + m.master_bytes, " B");
}

Engine::~Engine() {
  for (auto& u : units_) {
    if (u->module) UnitRegistry::instance().remove(u->module);
  }
  for (auto& b : buffers_) {
    for (const auto& e : b->layout.entries()) {
      torch::autograd::impl::set_post_acc_grad_hooks(e.param, nullptr);
    }
  }
}

void Engine::build_units() {
  std::unordered_map<std::string, std::shared_ptr<torch::nn::Module>> modules;
  for (const auto& item : model_->named_modules()) modules[item.key()] = item.value();
  std::unordered_set<const void*> claimed;
  for (const auto& name : options_.units) {
    auto it = modules.find(name);
    ZT_CHECK(it != modules.end(), "engine unit '", name, "' is not a submodule of the model");
    auto unit = std::make_unique<Unit>();
    unit->name = name;
    unit->module = it->second.get();
    for (const auto& p : it->second->named_parameters(/*recurse=*/true)) {
      if (!p.value().requires_grad()) continue;
      ZT_CHECK(claimed.insert(p.value().unsafeGetTensorImpl()).second, "parameter ", name, ".",
               p.key(), " belongs to two engine units");
      unit->params.emplace_back(name + "." + p.key(), p.value());
    }
    units_.push_back(std::move(unit));
  }
  auto root = std::make_unique<Unit>();
  for (const auto& p : model_->named_parameters(/*recurse=*/true)) {
    if (!p.value().requires_grad()) {
      frozen_params_.push_back(p.value());
      continue;
    }
    if (claimed.count(p.value().unsafeGetTensorImpl())) continue;
    root->params.emplace_back(p.key(), p.value());
  }
  units_.push_back(std::move(root));
}

void Engine::build_buffers() {
  const int stage = options_.stage;
  const at::ScalarType acc = options_.grad_accum_dtype;
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = *units_[u];
    // Reverse registration order approximates the order backward produces gradients, so
    // buckets fill one after another.
    std::vector<std::pair<std::string, at::Tensor>> params(unit.params.rbegin(),
                                                           unit.params.rend());
    std::vector<at::Tensor> tensors;
    for (auto& p : params) tensors.push_back(p.second);
    size_t first = 0;
    for (size_t count : dist::plan_buckets(tensors, options_.reduce_bucket_size)) {
      std::vector<std::pair<std::string, at::Tensor>> group(params.begin() + first,
                                                            params.begin() + first + count);
      first += count;
      auto b = std::make_unique<Buffer>(dist::FlatLayout(std::move(group), world_));
      b->unit = u;
      const auto& e0 = b->layout.entries().front().param;
      at::TensorOptions popt = e0.options().requires_grad(false);
      b->param_flat = at::empty({b->layout.padded_numel()}, popt);
      b->layout.bind_parameters(b->param_flat);
      for (const auto& e : b->layout.entries()) {
        ZT_CHECK(e.param.scalar_type() == e0.scalar_type() && e.param.device() == e0.device(),
                 "parameters of one flat buffer must share dtype and device: ", e.name, " is ",
                 e.param.scalar_type(), " on ", e.param.device(), ", ",
                 b->layout.entries().front().name, " is ", e0.scalar_type(), " on ", e0.device());
        b->no_decay.push_back(matches_any(e.name, options_.param_groups.no_decay_patterns));
      }
      const int64_t shard = b->layout.shard_numel();
      at::TensorOptions gopt = popt.dtype(acc);
      if (stage <= 1) {
        b->grad_full = at::zeros({b->layout.padded_numel()}, gopt);
      } else {
        b->grad_shard = at::zeros({shard}, gopt);
      }
      b->persistent = stage == 3 && b->layout.numel() < options_.stage3_param_persistence_threshold;
      b->optimizer = optim::make_shard_optimizer(optimizer_spec_for(popt.device()));
      buffers_.push_back(std::move(b));
      unit.buffers.push_back(buffers_.size() - 1);
    }
  }
}

// Adam/AdamW stepping a shard on a GPU is the plugin's fused kernel (one launch per buffer
// instead of ~10 ATen kernels per parameter group), as DeepSpeed picks FusedAdam; the formula is
// the same. With offload the shard is stepped on the host by the configured optimizer.
optim::OptimizerSpec Engine::optimizer_spec_for(const c10::Device& param_device) const {
  optim::OptimizerSpec spec = options_.optimizer;
  const bool adam = spec.type == "Adam" || spec.type == "AdamW";
  if (param_device.is_cuda() && !options_.offload_optimizer && adam) {
    spec.adamw_mode = spec.type == "AdamW";
    spec.type = "FusedAdam";
    spec.cuda_launcher = cuda::require_symbol(optim::kFusedAdamSymbol, "Adam on a GPU shard");
  }
  return spec;
}

void Engine::broadcast_initial_state() {
  // Every rank starts from rank 0's weights (as DDP does), so models built with different seeds
  // still train identically.
  std::vector<dist::WorkPtr> works;
  for (auto& b : buffers_) works.push_back(comm_->broadcast(b->param_flat, 0));
  for (auto& p : frozen_params_) {
    at::Tensor t = p.detach();
    if (t.is_contiguous()) works.push_back(comm_->broadcast(t, 0));
  }
  for (auto& buf : model_->buffers(/*recurse=*/true)) {
    if (buf.is_contiguous()) works.push_back(comm_->broadcast(buf, 0));
  }
  for (auto& w : works) w->wait();

  for (auto& bp : buffers_) {
    Buffer& b = *bp;
    const dist::Range own = b.layout.shard_range(rank_);
    if (options_.stage == 3) {
      b.param_shard = b.param_flat.narrow(0, own.begin, own.size()).clone();
    }
    const bool separate_master = options_.offload_optimizer || options_.compute_dtype != at::kFloat;
    if (separate_master) {
      at::Tensor src =
          options_.stage == 0 ? b.param_flat : b.param_flat.narrow(0, own.begin, own.size());
      // The master lives with the optimizer: next to the parameters, or in host memory with
      // offload (pinned when the parameters are on a GPU, so the copies can be asynchronous).
      const bool on_host = options_.offload_optimizer || !src.is_cuda();
      at::TensorOptions mopt = at::TensorOptions().dtype(at::kFloat);
      if (on_host) mopt = mopt.device(at::kCPU).pinned_memory(src.is_cuda());
      b.master = at::empty({src.numel()}, mopt);
      b.master.copy_(src);
    }
  }
}

// fp16/bf16: the flat buffers (and with them the parameters) become 16-bit copies of the fp32
// values the masters were taken from; frozen parameters and floating buffers are cast too.
// Stage 3 then releases every non-persistent buffer: from here on only shards are resident.
void Engine::cast_model_to_compute_dtype() {
  const at::ScalarType cd = options_.compute_dtype;
  at::NoGradGuard no_grad;
  for (auto& bp : buffers_) {
    Buffer& b = *bp;
    if (cd != at::kFloat) {
      at::Tensor flat = b.param_flat.to(cd);
      b.layout.bind_parameters(flat);
      b.param_flat = flat;
      if (b.param_shard.defined()) b.param_shard = b.param_shard.to(cd);
    }
    if (options_.stage == 3 && !b.persistent) {
      release_storage(b.param_flat);
      b.gathered = false;
    }
  }
  if (cd == at::kFloat) return;
  for (auto& p : frozen_params_) {
    if (p.is_floating_point()) p.set_data(p.detach().to(cd));
  }
  for (auto& buf : model_->buffers(/*recurse=*/true)) {
    if (buf.is_floating_point()) buf.set_data(buf.detach().to(cd));
  }
}

void Engine::install_grad_hooks() {
  for (size_t bi = 0; bi < buffers_.size(); ++bi) {
    Buffer& b = *buffers_[bi];
    b.pending = static_cast<int>(b.layout.entries().size());
    for (size_t e = 0; e < b.layout.entries().size(); ++e) {
      torch::autograd::impl::set_post_acc_grad_hooks(b.layout.entries()[e].param,
                                                     std::make_unique<GradHook>(this, bi, e));
    }
  }
  for (size_t u = 0; u + 1 < units_.size(); ++u) {
    if (options_.stage != 3) continue;
    units_[u]->hooks = std::make_unique<UnitHooksImpl>(this, u);
    UnitRegistry::instance().add(units_[u]->module, units_[u]->hooks.get());
  }
}

bool Engine::is_gradient_accumulation_boundary() const {
  return (micro_steps_ + 1) % options_.gradient_accumulation_steps == 0;
}

at::Tensor Engine::forward(const std::function<at::Tensor()>& fn) {
  if (options_.stage == 3) gather_unit(units_.size() - 1, /*wait=*/true);
  at::Tensor out = fn();
  if (options_.stage == 3 && !(at::GradMode::is_enabled() && out.requires_grad()) &&
      gathered_scopes_ == 0) {
    release_all();  // evaluation: no backward will follow
  }
  return out;
}

void Engine::backward(const at::Tensor& loss) {
  ZT_CHECK(loss.defined() && loss.numel() == 1, "engine.backward needs a scalar loss");
  in_backward_ = true;
  // fp16: the loss is multiplied by the loss scale (in fp32, so the product itself cannot
  // overflow); the gradients are unscaled at the step, fused with the inf/NaN check.
  const double factor = loss_scale() / options_.gradient_accumulation_steps;
  at::Tensor scaled = loss;
  if (scaler_) {
    scaled = loss.to(at::kFloat) * factor;
  } else if (factor != 1.0) {
    scaled = loss * factor;
  }
  try {
    scaled.backward();
  } catch (...) {
    in_backward_ = false;
    throw;
  }
  finish_backward();
  in_backward_ = false;
}

void Engine::on_grad_ready(size_t bi, size_t entry, const at::Tensor& param) {
  Buffer& b = *buffers_[bi];
  const dist::FlatEntry& e = b.layout.entries()[entry];
  at::Tensor g = param.grad();
  if (g.defined()) {
    at::NoGradGuard no_grad;
    at::Tensor flat_g = g.reshape({-1});
    if (options_.stage <= 1) {
      b.grad_full.narrow(0, e.range.begin, e.range.size()).add_(flat_g);
    } else {
      if (!b.staging.defined()) {
        b.staging = at::zeros({b.layout.padded_numel()}, b.grad_shard.options());
      }
      b.staging.narrow(0, e.range.begin, e.range.size()).add_(flat_g);
    }
    // The gradient now lives in the engine's buffers; drop autograd's copy.
    param.mutable_grad() = at::Tensor();
  }
  if (--b.pending == 0) on_buffer_ready(bi);
}

void Engine::on_buffer_ready(size_t bi) {
  Buffer& b = *buffers_[bi];
  if (options_.stage == 3 && !b.persistent && units_[b.unit]->module != nullptr) {
    // Every parameter of this buffer has its gradient, so no backward node needs them anymore.
    release_buffer(bi);
  }
  const bool reduce_now = options_.stage >= 2 || is_gradient_accumulation_boundary();
  if (reduce_now) launch_reduction(bi);
}

void Engine::launch_reduction(size_t bi) {
  Buffer& b = *buffers_[bi];
  if (b.launched) return;
  b.launched = true;
  dist::WorkPtr work;
  switch (options_.stage) {
    case 0: work = comm_->all_reduce(b.grad_full, dist::ReduceOp::kSum); break;
    case 1:
      b.reduced = at::empty({b.layout.shard_numel()}, b.grad_full.options());
      work = comm_->reduce_scatter(b.grad_full, b.reduced, dist::ReduceOp::kSum);
      break;
    default:
      if (!b.staging.defined()) {  // no parameter of this buffer got a gradient
        b.staging = at::zeros({b.layout.padded_numel()}, b.grad_shard.options());
      }
      if (b.shard_has_grad) {
        b.reduced = at::empty({b.layout.shard_numel()}, b.grad_shard.options());
        work = comm_->reduce_scatter(b.staging, b.reduced, dist::ReduceOp::kSum);
      } else {
        work = comm_->reduce_scatter(b.staging, b.grad_shard, dist::ReduceOp::kSum);
      }
      break;
  }
  inflight_.push_back({bi, std::move(work)});
  drain_reductions(static_cast<size_t>(std::max(1, options_.max_inflight_reductions)));
}

// Waits for the oldest reductions until at most keep_inflight remain, and folds their results
// into the accumulation buffers.
void Engine::drain_reductions(size_t keep_inflight) {
  size_t done = 0;
  while (inflight_.size() - done > keep_inflight) {
    Inflight& f = inflight_[done++];
    timed_wait(f.work);
    Buffer& b = *buffers_[f.buffer];
    if (options_.stage >= 2) {
      if (b.shard_has_grad) {
        b.grad_shard.add_(b.reduced);
        b.reduced = at::Tensor();
      }
      b.shard_has_grad = true;
      b.staging = at::Tensor();  // transient: freed as soon as it is reduced
    }
  }
  inflight_.erase(inflight_.begin(), inflight_.begin() + static_cast<long>(done));
}

void Engine::timed_wait(const dist::WorkPtr& work) {
  auto start = std::chrono::steady_clock::now();
  work->wait();
  comm_wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Engine::finish_backward() {
  // Buffers some of whose parameters got no gradient are reduced now, in bucket order, so every
  // rank issues the same collectives in the same order.
  for (size_t bi = 0; bi < buffers_.size(); ++bi) {
    Buffer& b = *buffers_[bi];
    if (b.pending > 0) {
      b.pending = 0;
      on_buffer_ready(bi);
    }
  }
  drain_reductions(0);
  for (auto& b : buffers_) {
    b->pending = static_cast<int>(b->layout.entries().size());
    b->launched = false;
  }
  if (options_.stage == 3 && gathered_scopes_ == 0) release_all();
}

void Engine::step() {
  const bool boundary = is_gradient_accumulation_boundary();
  ++micro_steps_;
  if (!boundary) return;
  optimizer_step();
}

at::Tensor Engine::owned_grad(Buffer& b) {
  switch (options_.stage) {
    case 0: return b.grad_full;
    case 1: return b.reduced;
    default: return b.grad_shard;
  }
}

at::Tensor Engine::param_target(Buffer& b) {
  if (options_.stage == 0) return b.param_flat;
  if (options_.stage == 3) return b.param_shard;
  const dist::Range own = b.layout.shard_range(rank_);
  return b.param_flat.narrow(0, own.begin, own.size());
}

double Engine::global_grad_norm_squared() {
  at::NoGradGuard no_grad;
  // Per buffer an fp32 norm (LibTorch reduces in a tree, so it stays accurate over millions of
  // elements without a float64 copy of every gradient), squared and summed in float64 on the
  // gradients' device, voted there, and read back once.
  const c10::Device device = buffers_.empty() ? c10::Device(at::kCPU) : grad_device();
  at::Tensor t = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(device));
  for (auto& b : buffers_) {
    at::Tensor g = owned_grad(*b);
    if (g.defined() && g.numel() > 0) {
      t.add_(
          at::linalg_vector_norm(g, 2, c10::nullopt, false, at::kFloat).to(at::kDouble).square());
    }
  }
  // Stage 0: every rank holds the whole reduced gradient.
  if (options_.stage != 0) timed_wait(comm_->all_reduce(t, dist::ReduceOp::kSum));
  return t.item<double>();
}

c10::Device Engine::grad_device() const {
  const Buffer& b = *buffers_.front();
  return b.grad_full.defined() ? b.grad_full.device() : b.grad_shard.device();
}

std::vector<optim::GroupRange> Engine::groups_for(const Buffer& b, double lr) const {
  // Stage 0 steps the whole buffer; other stages step the owned slice. Padding belongs to no
  // group and is never updated.
  const dist::Range view =
      options_.stage == 0 ? dist::Range{0, b.layout.padded_numel()} : b.layout.shard_range(rank_);
  std::vector<optim::GroupRange> groups;
  for (size_t i = 0; i < b.layout.entries().size(); ++i) {
    dist::Range r = dist::intersect(b.layout.entries()[i].range, view);
    if (r.empty()) continue;
    optim::GroupHyper h = options_.hyper;
    h.lr = lr;
    if (b.no_decay[i]) h.weight_decay = 0.0;
    int64_t begin = r.begin - view.begin, end = r.end - view.begin;
    if (!groups.empty() && groups.back().end == begin &&
        groups.back().hyper.weight_decay == h.weight_decay) {
      groups.back().end = end;  // merge neighbours with equal hyper-parameters
    } else {
      groups.push_back({begin, end, h});
    }
  }
  return groups;
}

// Unscales every owned gradient by inv_scale in the same pass that looks for inf/NaN, and
// agrees across ranks (all-reduce max), so every rank skips together.
// The flag lives on the gradients' device: on a GPU the per-buffer kernels, the vote and the one
// read-back are a single host synchronisation.
bool Engine::grads_overflow(double inv_scale) {
  const c10::Device device = buffers_.empty() ? c10::Device(at::kCPU) : grad_device();
  at::Tensor flag = at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(device));
  for (auto& b : buffers_) {
    at::Tensor g = owned_grad(*b);
    if (g.defined() && g.numel() > 0) {
      check_and_unscale_into_(g, static_cast<float>(inv_scale), flag);
    }
  }
  timed_wait(comm_->all_reduce(flag, dist::ReduceOp::kMax));
  return flag.item<int>() != 0;
}

// Names of the parameters whose owned gradient slice holds inf/NaN on this rank.
std::string Engine::overflow_culprits() {
  std::string names;
  for (auto& bp : buffers_) {
    Buffer& b = *bp;
    at::Tensor g = owned_grad(b);
    if (!g.defined()) continue;
    const dist::Range view =
        options_.stage == 0 ? dist::Range{0, b.layout.padded_numel()} : b.layout.shard_range(rank_);
    for (const auto& e : b.layout.entries()) {
      dist::Range r = dist::intersect(e.range, view);
      if (r.empty()) continue;
      if (!g.narrow(0, r.begin - view.begin, r.size()).isfinite().all().item<bool>()) {
        names += (names.empty() ? "" : ", ") + e.name;
      }
    }
  }
  return names.empty() ? "none on this rank" : names;
}

void Engine::optimizer_step() {
  at::NoGradGuard no_grad;
  // Average over ranks (each rank's loss is the mean over its micro-batch) and, in fp16, undo
  // the loss scale, in one pass that also finds inf/NaN.
  const double inv = 1.0 / (world_ * loss_scale());
  if (options_.compute_dtype == at::kFloat) {
    for (auto& b : buffers_) {
      at::Tensor g = owned_grad(*b);
      if (g.defined() && world_ > 1) g.mul_(inv);
    }
  } else if (grads_overflow(inv)) {
    // Skip the step on every rank; the LR schedule does not advance.
    if (scaler_) {
      if (scaler_->at_minimum()) {
        ZT_THROW("fp16 loss scale collapsed: gradients overflow at step ", global_step_,
                 " with the scale already at min_loss_scale ", scaler_->scale(),
                 "; parameters with inf/NaN gradients: ", overflow_culprits(),
                 " (try bf16, a lower lr, or gradient_clipping)");
      }
      scaler_->update(true);
    }
    ZT_LOG_INFO("step ", global_step_, ": inf/NaN gradients, step skipped; loss scale now ",
                loss_scale());
    reset_accumulation();
    ++global_step_;
    ++skipped_steps_;
    return;
  } else if (scaler_) {
    scaler_->update(false);
  }
  last_grad_norm_ = std::sqrt(global_grad_norm_squared());
  double clip = 1.0;
  if (options_.gradient_clipping > 0 && last_grad_norm_ > options_.gradient_clipping) {
    clip = options_.gradient_clipping / (last_grad_norm_ + 1e-6);
  }
  const double lr = get_lr();
  if (host_offload_) {
    offload_step(clip, lr);
    return;
  }
  for (auto& bp : buffers_) {
    Buffer& b = *bp;
    at::Tensor g = owned_grad(b);
    if (!g.defined()) continue;
    if (clip != 1.0) g.mul_(clip);
    auto groups = groups_for(b, lr);
    at::Tensor target = param_target(b);
    if (b.master.defined()) {
      at::Tensor g32 = g.to(at::TensorOptions().dtype(at::kFloat).device(b.master.device()));
      if (target.scalar_type() != at::kFloat && target.device() == b.master.device()) {
        b.optimizer->step(b.master, g32, groups, &target);  // 16-bit copy in the same pass
      } else {
        b.optimizer->step(b.master, g32, groups);
        target.copy_(b.master);
      }
    } else {
      at::Tensor g32 = g.scalar_type() == at::kFloat ? g : g.to(at::kFloat);
      b.optimizer->step(target, g32, groups);
    }
    publish_params(b);
  }
  reset_accumulation();
  ++global_step_;
}

// Optimizer offload with the model on a GPU (core/zero/host_offload.h): every owned gradient starts
// its copy to pinned host memory at once; each buffer is stepped on the host as soon as its copy
// landed, and its 16-bit parameters go back while the next buffer steps.
void Engine::offload_step(double clip, double lr) {
  std::vector<size_t> stepped;
  for (size_t bi = 0; bi < buffers_.size(); ++bi) {
    at::Tensor g = owned_grad(*buffers_[bi]);
    if (!g.defined()) continue;
    if (clip != 1.0) g.mul_(clip);
    host_offload_->start_grad_copy(bi, g.scalar_type() == at::kFloat ? g : g.to(at::kFloat));
    stepped.push_back(bi);
  }
  for (size_t bi : stepped) {
    Buffer& b = *buffers_[bi];
    at::Tensor g32 = host_offload_->wait_grad(bi);
    at::Tensor target = param_target(b);
    auto groups = groups_for(b, lr);
    if (target.scalar_type() == at::kFloat) {
      b.optimizer->step(b.master, g32, groups);
      at::Tensor staging = host_offload_->param_staging(bi, b.master.numel(), at::kFloat);
      staging.copy_(b.master);
    } else {
      at::Tensor staging = host_offload_->param_staging(bi, b.master.numel(), target.scalar_type());
      b.optimizer->step(b.master, g32, groups, &staging);  // 16-bit copy in the same pass
    }
    host_offload_->start_param_copy(bi, target);
  }
  host_offload_->finish();
  for (size_t bi : stepped) publish_params(*buffers_[bi]);
  reset_accumulation();
  ++global_step_;
}

void Engine::publish_params(Buffer& b) {
  const int stage = options_.stage;
  if (world_ == 1 || stage == 0) return;
  if (stage == 3 && !b.persistent) return;  // gathered from the shard on next use
  at::Tensor shard = param_target(b).clone();
  timed_wait(comm_->all_gather(shard, b.param_flat));
}

void Engine::reset_accumulation() {
  for (auto& b : buffers_) {
    if (b->grad_full.defined()) b->grad_full.zero_();
    if (b->grad_shard.defined()) b->grad_shard.zero_();
    b->shard_has_grad = false;
    b->reduced = at::Tensor();
    b->staging = at::Tensor();
  }
}

void Engine::zero_grad() {
  ZT_CHECK(!in_backward_, "engine.zero_grad() called during backward");
  reset_accumulation();
}

double Engine::get_lr() const {
  // Skipped (overflow) steps do not advance the schedule.
  return options_.lr_schedule ? options_.lr_schedule(global_step_ - skipped_steps_)
                              : options_.hyper.lr;
}

void Engine::train(bool on) {
  model_->train(on);
}

// ---- stage 3: gathering and releasing -------------------------------------------------------

void Engine::gather_buffer(size_t bi, bool wait) {
  Buffer& b = *buffers_[bi];
  if (b.gathered) return;
  if (!b.gather_work) {
    const size_t nbytes =
        static_cast<size_t>(b.layout.padded_numel()) * c10::elementSize(b.param_flat.scalar_type());
    refill_storage(b.param_flat, nbytes);
    gathered_bytes_ += static_cast<int64_t>(nbytes);
    peak_gathered_bytes_ = std::max(peak_gathered_bytes_, gathered_bytes_);
    b.gather_work = comm_->all_gather(b.param_shard, b.param_flat);
  }
  if (wait) wait_gathered(bi);
}

void Engine::wait_gathered(size_t bi) {
  Buffer& b = *buffers_[bi];
  if (b.gathered || !b.gather_work) return;
  timed_wait(b.gather_work);
  b.gather_work.reset();
  b.gathered = true;
}

void Engine::release_buffer(size_t bi) {
  Buffer& b = *buffers_[bi];
  if (b.persistent || (!b.gathered && !b.gather_work)) return;
  wait_gathered(bi);  // an all-gather must not write into freed memory
  release_storage(b.param_flat);
  gathered_bytes_ -= b.layout.padded_numel() * element_size(b.param_flat.scalar_type());
  b.gathered = false;
}

void Engine::gather_unit(size_t u, bool wait) {
  if (options_.stage != 3) return;
  for (size_t bi : units_[u]->buffers) gather_buffer(bi, false);
  if (wait) {
    for (size_t bi : units_[u]->buffers) wait_gathered(bi);
  }
}

// Starts gathering the units after (direction +1, forward) or before (-1, backward) unit u,
// up to stage3_prefetch_bucket_size elements. The root unit (last) is never prefetched.
void Engine::prefetch_after(size_t u, int direction) {
  int64_t budget = options_.stage3_prefetch_bucket_size;
  const int64_t declared = static_cast<int64_t>(units_.size()) - 1;
  for (int64_t v = static_cast<int64_t>(u) + direction; v >= 0 && v < declared && budget > 0;
       v += direction) {
    for (size_t bi : units_[static_cast<size_t>(v)]->buffers) {
      budget -= buffers_[bi]->layout.padded_numel();
      gather_buffer(bi, false);
    }
  }
}

void Engine::release_unit(size_t u) {
  if (options_.stage != 3) return;
  for (size_t bi : units_[u]->buffers) release_buffer(bi);
}

void Engine::gather_all() {
  for (size_t u = 0; u < units_.size(); ++u) gather_unit(u, false);
  for (size_t bi = 0; bi < buffers_.size(); ++bi) wait_gathered(bi);
}

void Engine::release_all() {
  for (size_t bi = 0; bi < buffers_.size(); ++bi) release_buffer(bi);
}

MemoryReport Engine::memory() const {
  MemoryReport m;
  for (const auto& bp : buffers_) {
    const Buffer& b = *bp;
    const int64_t pe = element_size(b.param_flat.scalar_type());
    if (options_.stage == 3) {
      m.param_bytes += b.persistent ? b.layout.padded_numel() * pe : b.layout.shard_numel() * pe;
    } else {
      m.param_bytes += b.layout.padded_numel() * pe;
    }
    if (b.grad_full.defined()) m.grad_bytes += b.grad_full.numel() * b.grad_full.element_size();
    if (b.grad_shard.defined()) m.grad_bytes += b.grad_shard.numel() * b.grad_shard.element_size();
    m.optimizer_state_bytes += b.optimizer->state_bytes();
    if (b.master.defined()) m.master_bytes += b.master.numel() * b.master.element_size();
  }
  m.gathered_param_bytes = gathered_bytes_;
  m.peak_gathered_param_bytes = peak_gathered_bytes_;
  return m;
}

std::vector<Engine::ShardState> Engine::shard_states() {
  std::vector<ShardState> out;
  for (auto& bp : buffers_) {
    Buffer& b = *bp;
    ShardState st;
    st.layout = &b.layout;
    st.stepped =
        options_.stage == 0 ? dist::Range{0, b.layout.padded_numel()} : b.layout.shard_range(rank_);
    st.master = b.master.defined() ? b.master : param_target(b);
    st.optimizer = b.optimizer.get();
    out.push_back(st);
  }
  return out;
}

void Engine::sync_params_from_masters() {
  at::NoGradGuard no_grad;
  for (auto& bp : buffers_) {
    Buffer& b = *bp;
    if (b.master.defined()) param_target(b).copy_(b.master);
    if (options_.stage != 3) {
      publish_params(b);
    } else if (b.persistent || b.gathered) {  // resident full buffers take the new shards
      comm_->all_gather(b.param_shard, b.param_flat)->wait();
    }
  }
}

void Engine::restore_counters(int64_t global_step, int64_t skipped_steps, int64_t micro_steps) {
  global_step_ = global_step;
  skipped_steps_ = skipped_steps;
  micro_steps_ = micro_steps;
  reset_accumulation();
}

std::vector<std::pair<std::string, at::Tensor>> Engine::named_parameters_by_unit() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& unit : units_) out.insert(out.end(), unit->params.begin(), unit->params.end());
  for (const auto& p : model_->named_parameters(/*recurse=*/true)) {
    if (!p.value().requires_grad()) out.emplace_back(p.key(), p.value());
  }
  return out;
}

void Engine::for_each_full_parameter(
    const std::function<void(const std::string&, const at::Tensor&)>& fn) {
  at::NoGradGuard no_grad;
  for (size_t u = 0; u < units_.size(); ++u) {
    gather_unit(u, /*wait=*/true);
    for (const auto& [name, param] : units_[u]->params) fn(name, param);
    if (gathered_scopes_ == 0) release_unit(u);
  }
  for (const auto& p : model_->named_parameters(/*recurse=*/true)) {
    if (!p.value().requires_grad()) fn(p.key(), p.value());
  }
}

Engine::GatheredParameters::GatheredParameters(Engine& engine, bool write_back)
    : engine_(engine), write_back_(write_back) {
  ++engine_.gathered_scopes_;
  if (engine_.options_.stage == 3) engine_.gather_all();
}

Engine::GatheredParameters::~GatheredParameters() {
  Engine& e = engine_;
  if (write_back_) {
    at::NoGradGuard no_grad;
    for (auto& bp : e.buffers_) {
      Buffer& b = *bp;
      const dist::Range own = b.layout.shard_range(e.rank_);
      at::Tensor own_full = b.param_flat.narrow(0, own.begin, own.size());
      if (e.options_.stage == 3) b.param_shard.copy_(own_full);
      if (b.master.defined()) {
        b.master.copy_(e.options_.stage == 0 ? b.param_flat : own_full);
      }
    }
  }
  if (--e.gathered_scopes_ == 0 && e.options_.stage == 3 && !e.in_backward_) e.release_all();
}

}  // namespace zt
