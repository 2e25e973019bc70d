#include "core/engine.h"

#include <chrono>
#include <map>
#include <string>
#include <unordered_set>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "base/env_vars.h"
#include "base/error.h"
#include "base/logging.h"
#include "core/activations/activation_checkpoint.h"
#include "core/precision/loss_scaler.h"
#include "core/profile/flops_profiler.h"
#include "core/zero/bucket.h"
#include "core/zero/grad_sync.h"
#include "core/zero/host_caching_allocator.h"
#include "core/zero/nvme_params.h"
#include "core/zero/param_gather.h"
#include "core/zero/partitioned_init.h"
#include "core/zero/sharded_step.h"
#include "core/zero/units.h"
#include "core/zero/wait_clock.h"
#include "optim/shard_optimizer.h"
#include "parallel/communicator.h"
#include "parallel/env.h"
#include "parallel/groups.h"

namespace zt {

// The engine's state: the model, its options and communicator, and the ZeRO parts built from
// them (core/zero/), in the order they are built; each part refers to buckets_.
struct Engine::Impl {
  // A CPU model's engine holds the host caching allocator (core/zero/host_caching_allocator.h)
  // from its construction to its destruction.
  struct HostCacheHold {
    bool held = false;
    ~HostCacheHold() {
      if (held) zero::release_host_cache();
    }
  } host_cache_;
  std::shared_ptr<torch::nn::Module> model_;
  EngineOptions options_;
  std::shared_ptr<dist::Communicator> comm_;
  // Hybrid sharding (mics_shard_size at stage 3): the state is sharded over shard_comm_ and
  // replicated across replica_comm_ (parallel/groups.h); otherwise shard_comm_ is comm_ and
  // replica_comm_ is null.
  std::shared_ptr<dist::Communicator> shard_comm_, replica_comm_;
  // ZeRO++ hpZ: consecutive ranks of the shard group holding the secondary partition.
  std::shared_ptr<dist::Communicator> hpz_comm_;
  // qgZ (stage 3) or the hierarchical reduction (stages 0-2): node_reduce_groups below.
  std::unique_ptr<dist::NodeGroups> node_groups_;
  // mics_hierarchical_params_gather: the shard group's node groups (hierarchical_gather_groups).
  std::unique_ptr<dist::NodeGroups> gather_groups_;
  int rank_ = 0;
  int world_ = 1;

  zero::UnitPlan plan_;
  std::unique_ptr<zero::NvmeParamSwapper> param_swapper_;  // offload_param nvme: shard files
  std::vector<std::unique_ptr<zero::Bucket>> buckets_;
  // Stage 3: the units' frozen parameters, sharded (units.h: make_frozen_buckets); loose_frozen_
  // are the frozen parameters outside them (every one below stage 3), whole on every rank.
  std::vector<std::unique_ptr<zero::Bucket>> frozen_buckets_;
  std::vector<std::pair<std::string, at::Tensor>> loose_frozen_;
  zero::WaitClock clock_;
  std::unique_ptr<zero::ParamGather> gather_;
  std::unique_ptr<zero::GradSync> grad_sync_;
  std::unique_ptr<zero::ShardedStep> sharded_step_;

  std::unique_ptr<DynamicLossScaler> scaler_;
  int64_t micro_steps_ = 0;
  int64_t global_step_ = 0;
  int64_t skipped_steps_ = 0;
  double last_grad_norm_ = 0.0;
  bool in_backward_ = false;
  std::unique_ptr<profile::FlopsProfiler> flops_;  // flops_profiler.enabled
  // wall_clock_breakdown: seconds since the last report.
  struct Breakdown {
    double forward = 0, backward = 0, step = 0, comm_wait_at_start = 0;
  } breakdown_;
};

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// DeepSpeed's gradient averaging (gradient_reduction_w_predivide): with prescale_gradients the
// whole 1/N is applied before the sum; otherwise 1/f before it and f/N after it (f =
// gradient_predivide_factor, 1 by default, so the default is sum, then 1/N).
std::pair<double, double> reduce_scales(const EngineOptions& o, int world) {
  if (o.prescale_gradients) return {1.0 / world, 1.0};
  const double f = o.gradient_predivide_factor;
  return {f != 1.0 ? 1.0 / f : 1.0, f != world ? f / world : 1.0};
}

// The node groups of the sharding communicator for the two-level gradient reductions: ZeRO++ qgZ
// at stage 3 (quantized_reduce.h) and the hierarchical reduction at stages 0-2
// (hierarchical_reduce.h). Null where neither applies or the layout does not allow it (one node,
// ranks not numbered node by node): the gradients then reduce flat over every rank.
std::unique_ptr<dist::NodeGroups> node_reduce_groups(const EngineOptions& o,
                                                     dist::Communicator& shard, bool hybrid) {
  const bool qgz = o.zero_quantized_gradients && o.stage == 3;  // the config warns below 3
  bool hierarchical = false;
  if (o.stage <= 2 && shard.size() > 1) {
    using R = EngineOptions::TwoLevelReduce;
    // NCCL already picks topology-aware rings and trees across nodes.
    hierarchical = o.hierarchical_reduce == R::kOn ||
                   (o.hierarchical_reduce == R::kAuto && shard.backend() != "nccl");
  }
  if (!qgz && !hierarchical) return nullptr;
  const char* what =
      qgz ? "zero_optimization.zero_quantized_gradients" : "the hierarchical gradient reduction";
  if (qgz && hybrid) {
    ZT_LOG_WARN(
        "zero_optimization.zero_quantized_gradients with mics_shard_size: the gradients "
        "reduce-scatter unquantized in the shard group");
    return nullptr;
  }
  const dist::Env env = dist::Env::from_lookup(::zt::env::get);
  const bool same_ranks = env.rank == shard.rank() && env.world_size == shard.size();
  // Collective: every rank takes the same branch (the same environment kind everywhere).
  const dist::NodeLayout layout =
      same_ranks ? dist::discover_node_layout(shard, env) : dist::NodeLayout{};
  const int local = layout.nodes() > 0 ? static_cast<int>(layout.ranks.front().size()) : 0;
  if (!layout.node_major() || (!qgz && local < 2)) {
    // One rank per node: the flat ring already crosses each link once per step.
    if (qgz && shard.rank() == 0) {
      ZT_LOG_INFO(what, ": ", layout.nodes() < 2 ? "one node" : "ranks not numbered node by node",
                  ", so the gradients reduce-scatter unquantized (as DeepSpeed does on one node)");
    }
    return nullptr;
  }
  auto groups = std::make_unique<dist::NodeGroups>(dist::make_node_groups(shard, layout));
  if (shard.rank() == 0) {
    ZT_LOG_INFO(what, ": ", qgz ? "int8 all-to-alls" : "reductions in the node, then across",
                " in ", layout.nodes(), " nodes of ", groups->intra->size(), " ranks");
  }
  return groups;
}

// MiCS's mics_hierarchical_params_gather: the node groups of this rank's hybrid shard group when
// the group spans several nodes (numbered node by node, as many ranks on each); else null, and a
// shard group gathers with one all-gather. Collective over `world`, then over `shard`.
std::unique_ptr<dist::NodeGroups> hierarchical_gather_groups(const EngineOptions& o,
                                                             dist::Communicator& world,
                                                             dist::Communicator& shard) {
  if (!o.mics_hierarchical_params_gather || o.stage != 3 || o.mics_shard_size <= 0) {
    return nullptr;  // the config warns where the key does not act
  }
  const char* key = "zero_optimization.mics_hierarchical_params_gather";
  if (o.zero_quantized_weights) {
    if (world.rank() == 0) {
      ZT_LOG_INFO(key, ": qwZ's quantized gathers stay one all-gather in the shard group");
    }
    return nullptr;
  }
  const dist::Env env = dist::Env::from_lookup(::zt::env::get);
  const bool same_ranks = env.rank == world.rank() && env.world_size == world.size();
  const dist::NodeLayout layout =
      same_ranks ? dist::discover_node_layout(world, env) : dist::NodeLayout{};
  // The shard group is world ranks [first, first + size) (parallel/groups.h); its own layout
  // numbers the nodes it touches in order.
  dist::NodeLayout group;
  if (same_ranks) {
    const int first = world.rank() - shard.rank();
    std::vector<int> index(static_cast<size_t>(layout.nodes()), -1);
    for (int i = 0; i < shard.size(); ++i) {
      int& b = index[static_cast<size_t>(layout.node_of_rank[static_cast<size_t>(first + i)])];
      if (b < 0) {
        b = group.nodes();
        group.ranks.emplace_back();
      }
      group.node_of_rank.push_back(b);
      group.ranks[static_cast<size_t>(b)].push_back(i);
    }
  }
  if (!group.node_major()) {
    if (world.rank() == 0) {
      ZT_LOG_INFO(key, ": ",
                  group.nodes() < 2 ? "each shard group is on one node"
                                    : "a shard group's ranks are not numbered node by node",
                  ", so it gathers with one all-gather");
    }
    return nullptr;
  }
  auto groups = std::make_unique<dist::NodeGroups>(dist::make_node_groups(shard, group));
  if (world.rank() == 0) {
    ZT_LOG_INFO(key, ": each shard group of ", shard.size(), " ranks gathers across its ",
                group.nodes(), " nodes, then in the node");
  }
  return groups;
}

}  // namespace

Engine::Engine(std::shared_ptr<torch::nn::Module> model, EngineOptions options,
               std::shared_ptr<dist::Communicator> comm,
               std::shared_ptr<zero::PartitionedInit> partitioned)
    : impl_(std::make_unique<Impl>()) {
  impl_->model_ = std::move(model);
  impl_->options_ = std::move(options);
  impl_->comm_ = std::move(comm);
  ZT_CHECK(impl_->model_ != nullptr, "Engine: model is null");
  configure_activation_checkpointing(impl_->options_.activation_checkpointing);
  ZT_CHECK(impl_->comm_ != nullptr, "Engine: communicator is null");
  ZT_CHECK(impl_->options_.stage >= 0 && impl_->options_.stage <= 3,
           "zero_optimization.stage must be 0..3, got ", impl_->options_.stage);
  ZT_CHECK(impl_->options_.gradient_accumulation_steps >= 1,
           "gradient_accumulation_steps must be >= 1, got ",
           impl_->options_.gradient_accumulation_steps);
  ZT_CHECK(impl_->options_.gradient_clipping >= 0, "gradient_clipping must be >= 0, got ",
           impl_->options_.gradient_clipping);
  ZT_CHECK(impl_->options_.gradient_predivide_factor > 0,
           "gradient_predivide_factor must be > 0, got ",
           impl_->options_.gradient_predivide_factor);
  auto is_float_type = [](at::ScalarType t) {
    return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
  };
  ZT_CHECK(is_float_type(impl_->options_.grad_accum_dtype),
           "data_types.grad_accum_dtype must be fp32, fp16 or bf16, got ",
           impl_->options_.grad_accum_dtype);
  ZT_CHECK(
      !impl_->options_.communication_dtype || is_float_type(*impl_->options_.communication_dtype),
      "communication_data_type must be fp32, fp16 or bf16, got ",
      *impl_->options_.communication_dtype);
  ZT_CHECK(is_float_type(impl_->options_.compute_dtype),
           "engine compute dtype must be fp32, fp16 or bf16, got ", impl_->options_.compute_dtype);
  if (impl_->options_.compute_dtype == at::kHalf) {
    impl_->scaler_ = std::make_unique<DynamicLossScaler>(impl_->options_.fp16);
  }
  impl_->rank_ = impl_->comm_->rank();
  impl_->world_ = impl_->comm_->size();
  // The average is over every rank whatever the sharding: the replica sum completes it.
  const auto [pre_scale, post_scale] = reduce_scales(impl_->options_, impl_->world_);
  make_shard_groups();
  make_hpz_group();

  impl_->plan_ = zero::plan_units(*impl_->model_, impl_->options_.units);
  zero::BucketOptions bo;
  bo.stage = impl_->options_.stage;
  bo.rank = impl_->shard_comm_->rank();
  bo.world = impl_->shard_comm_->size();
  if (impl_->hpz_comm_) {
    bo.hpz = impl_->hpz_comm_->size();
    bo.hpz_rank = impl_->hpz_comm_->rank();
  }
  bo.quantized_weights = impl_->options_.zero_quantized_weights && impl_->options_.stage == 3;
  impl_->node_groups_ =
      node_reduce_groups(impl_->options_, *impl_->shard_comm_, impl_->replica_comm_ != nullptr);
  (bo.stage == 3 ? bo.quantized_reduce : bo.hierarchical_reduce) = impl_->node_groups_.get();
  impl_->gather_groups_ =
      hierarchical_gather_groups(impl_->options_, *impl_->comm_, *impl_->shard_comm_);
  bo.hierarchical_gather = impl_->gather_groups_.get();
  bo.grad_dtype = impl_->options_.grad_accum_dtype;
  bo.comm_dtype = impl_->options_.communication_dtype.value_or(impl_->options_.grad_accum_dtype);
  bo.pre_reduce_scale = pre_scale;
  ZT_CHECK(
      impl_->options_.offload_param.device == OffloadDevice::kNone || impl_->options_.stage == 3,
      "zero_optimization.offload_param needs ZeRO stage 3; zero_optimization.stage is ",
      impl_->options_.stage);
  bool cpu_model = false;
  for (const at::Tensor& p : impl_->model_->parameters()) {
    cpu_model = p.is_cpu();
    break;
  }
  if (cpu_model && impl_->options_.host_cache) {
    zero::acquire_host_cache();
    impl_->host_cache_.held = true;
  }
  bo.release_grad_shard = cpu_model && bo.stage >= 2;
  bo.host_shard = impl_->options_.offload_param.device != OffloadDevice::kNone;
  bo.pin_shard = impl_->options_.offload_param.pin_memory;
  if (partitioned && partitioned->empty()) partitioned.reset();
  if (partitioned) {
    check_partitioned(partitioned->options());
    partitioned->check_same_on_every_rank(*impl_->comm_);
  }
  impl_->buckets_ =
      zero::make_buckets(impl_->plan_, impl_->options_.reduce_bucket_size, bo,
                         impl_->options_.stage3_param_persistence_threshold, partitioned.get());
  make_frozen_buckets(bo);
  impl_->sharded_step_ = std::make_unique<zero::ShardedStep>(
      impl_->options_, impl_->buckets_, *impl_->shard_comm_, impl_->replica_comm_.get(),
      impl_->rank_, impl_->clock_, post_scale);
  broadcast_initial_state();
  cast_model_to_compute_dtype();
  move_param_shards_to_nvme();
  impl_->gather_ = std::make_unique<zero::ParamGather>(
      impl_->plan_, impl_->buckets_, impl_->frozen_buckets_, *impl_->shard_comm_,
      impl_->hpz_comm_.get(), impl_->clock_, impl_->options_.stage == 3,
      impl_->options_.stage3_prefetch_bucket_size);
  impl_->grad_sync_ = std::make_unique<zero::GradSync>(
      impl_->buckets_, *impl_->shard_comm_, impl_->clock_, impl_->options_.max_inflight_reductions,
      [this](size_t b) { on_bucket_complete(b); });
  if (impl_->options_.flops_profiler.enabled) {
    profile::ProfileContext ctx;
    ctx.rank = impl_->rank_;
    ctx.world_size = impl_->world_;
    ctx.gradient_accumulation_steps = impl_->options_.gradient_accumulation_steps;
    ctx.dtype = impl_->options_.compute_dtype;
    for (const at::Tensor& p : impl_->model_->parameters()) {
      ctx.device = p.device();
      break;
    }
    impl_->flops_ = std::make_unique<profile::FlopsProfiler>(impl_->options_.flops_profiler,
                                                             *impl_->model_, ctx);
  }
  MemoryReport m = memory();
  ZT_LOG_INFO(
      "engine: ZeRO stage ", impl_->options_.stage, ", ", impl_->world_, " rank(s)",
      impl_->replica_comm_ ? detail::str(" (sharded in groups of ", impl_->shard_comm_->size(),
                                         ", ", impl_->replica_comm_->size(), " replicas)")
                           : std::string(),
      ", ", impl_->buckets_.size(), " flat buffer(s) in ", impl_->plan_.units.size(),
      " unit(s); model states per rank: params ", m.param_bytes, " B",
      m.frozen_param_bytes > 0 ? detail::str(" (+ ", m.frozen_param_bytes, " B frozen)")
                               : std::string(),
      ", grads ", m.grad_bytes, " B, optimizer ", m.optimizer_state_bytes + m.master_bytes, " B",
      m.nvme_bytes > 0 ? detail::str(" (+ ", m.nvme_bytes, " B on NVMe through ",
                                     m.nvme_buffer_bytes, " B of buffers)")
                       : std::string());
  // What construction freed (a model cast or sent to NVMe shard by shard) is not a step's: kept,
  // it would sit idle through the first steps, where a CPU model's memory peaks.
  if (impl_->host_cache_.held) zero::empty_host_cache();
}

Engine::~Engine() = default;

int64_t Engine::global_step() const {
  return impl_->global_step_;
}
int64_t Engine::skipped_steps() const {
  return impl_->skipped_steps_;
}
double Engine::loss_scale() const {
  return impl_->scaler_ ? impl_->scaler_->scale() : 1.0;
}
const DynamicLossScaler* Engine::loss_scaler() const {
  return impl_->scaler_.get();
}
DynamicLossScaler* Engine::mutable_loss_scaler() {
  return impl_->scaler_.get();
}
int64_t Engine::micro_steps() const {
  return impl_->micro_steps_;
}
double Engine::last_grad_norm() const {
  return impl_->last_grad_norm_;
}
const profile::StepFlops* Engine::step_flops() const {
  return impl_->flops_ ? &impl_->flops_->last() : nullptr;
}

double Engine::comm_wait_seconds() const {
  return impl_->clock_.seconds();
}
void Engine::reset_comm_wait() {
  impl_->clock_.reset();
}
std::shared_ptr<torch::nn::Module> Engine::model() const {
  return impl_->model_;
}
void Engine::make_shard_groups() {
  const int mics = impl_->options_.mics_shard_size;
  impl_->shard_comm_ = impl_->comm_;
  // Below stage 3 the key does nothing, as in DeepSpeed; the config says so once (validate.cpp).
  if (mics <= 0 || impl_->options_.stage != 3) return;
  dist::HybridGroups g =
      dist::make_hybrid_groups(impl_->comm_, mics, "zero_optimization.mics_shard_size");
  impl_->shard_comm_ = g.shard;
  impl_->replica_comm_ = g.replica;
}

// Stage 3 shards frozen parameters too, as DeepSpeed's does (a LoRA job's frozen base model is
// most of its memory); zero_quantized_nontrainable_weights stores those shards as int8 blocks.
void Engine::make_frozen_buckets(const zero::BucketOptions& trainable) {
  const EngineOptions& o = impl_->options_;
  if (o.stage == 3) {
    zero::BucketOptions fo = trainable;
    fo.quantized_storage = o.zero_quantized_nontrainable_weights;
    // The stored blocks are gathered as they are: one all-gather, as qwZ's.
    if (fo.quantized_storage) fo.hierarchical_gather = nullptr;
    impl_->frozen_buckets_ = zero::make_frozen_buckets(impl_->plan_, o.reduce_bucket_size, fo,
                                                       o.stage3_param_persistence_threshold);
  }
  std::unordered_set<const void*> bucketed;
  for (const auto& b : impl_->frozen_buckets_)
    for (const auto& e : b->layout().entries()) bucketed.insert(e.param.unsafeGetTensorImpl());
  for (const auto& p : impl_->model_->named_parameters(/*recurse=*/true)) {
    if (!p.value().requires_grad() && !bucketed.count(p.value().unsafeGetTensorImpl()))
      impl_->loose_frozen_.emplace_back(p.key(), p.value());
  }
  if (o.offload_param.device == OffloadDevice::kNvme && o.zero_quantized_nontrainable_weights &&
      !impl_->frozen_buckets_.empty() && impl_->rank_ == 0) {
    ZT_LOG_INFO(
        "offload_param nvme: the int8 shards of frozen parameters "
        "(zero_quantized_nontrainable_weights) stay in host memory");
  }
}

void Engine::make_hpz_group() {
  const int hpz = impl_->options_.zero_hpz_partition_size;
  if (hpz <= 1 || impl_->options_.stage != 3) return;  // the config warns below stage 3
  dist::Communicator& shard = *impl_->shard_comm_;
  ZT_CHECK(shard.size() % hpz == 0, "zero_optimization.zero_hpz_partition_size = ", hpz,
           " must divide the ranks the state is sharded over (", shard.size(), ")");
  if (hpz == shard.size()) return;  // the secondary partition would be the primary one
  std::vector<std::vector<int>> groups(shard.size() / hpz);
  for (int r = 0; r < shard.size(); ++r) groups[r / hpz].push_back(r);
  impl_->hpz_comm_ = dist::split_partition(shard, groups);
}

const dist::Communicator& Engine::shard_communicator() const {
  return *impl_->shard_comm_;
}
int Engine::replica_index() const {
  return impl_->replica_comm_ ? impl_->replica_comm_->rank() : 0;
}

const dist::Communicator& Engine::communicator() const {
  return *impl_->comm_;
}
dist::Communicator& Engine::communicator() {
  return *impl_->comm_;
}
const EngineOptions& Engine::options() const {
  return impl_->options_;
}

void Engine::check_partitioned(const zero::PartitionOptions& p) const {
  ZT_CHECK(impl_->options_.stage == 3,
           "the model was built partitioned (zero::PartitionedInit), which "
           "needs ZeRO stage 3; zero_optimization.stage is ",
           impl_->options_.stage);
  const int rank = impl_->shard_comm_->rank(), world = impl_->shard_comm_->size();
  ZT_CHECK(p.world == world && p.rank == rank, "the model was built partitioned for shard ", p.rank,
           " of ", p.world, "; this engine shards as ", rank, " of ", world,
           world != impl_->world_ ? " (zero_optimization.mics_shard_size)" : "");
  ZT_CHECK(p.reduce_bucket_size == impl_->options_.reduce_bucket_size &&
               p.persistence_threshold == impl_->options_.stage3_param_persistence_threshold,
           "the model was built partitioned with reduce_bucket_size ", p.reduce_bucket_size,
           " and stage3_param_persistence_threshold ", p.persistence_threshold, "; the engine has ",
           impl_->options_.reduce_bucket_size, " and ",
           impl_->options_.stage3_param_persistence_threshold);
}

void Engine::broadcast_initial_state() {
  // Every rank starts from rank 0's weights (as DDP does), so models built with different seeds
  // still train identically.
  // Buffers built partitioned hold the same values on every rank already (same constructor, same
  // seed) and no full copy to send.
  std::vector<dist::WorkPtr> works;
  for (auto& b : impl_->buckets_) {
    if (b->from_partitioned_construction()) continue;
    at::Tensor flat = b->params();
    works.push_back(impl_->comm_->broadcast(flat, 0));
  }
  for (auto& b : impl_->frozen_buckets_) {
    at::Tensor flat = b->params();
    works.push_back(impl_->comm_->broadcast(flat, 0));
  }
  for (auto& [name, p] : impl_->loose_frozen_) {
    at::Tensor t = p.detach();
    if (t.is_contiguous()) works.push_back(impl_->comm_->broadcast(t, 0));
  }
  for (auto& buf : impl_->model_->buffers(/*recurse=*/true)) {
    if (buf.is_contiguous()) works.push_back(impl_->comm_->broadcast(buf, 0));
  }
  for (auto& w : works) w->wait();
  for (auto& b : impl_->buckets_) b->keep_shard();
  for (auto& b : impl_->frozen_buckets_) b->keep_shard();
  impl_->sharded_step_->init_masters();
}

// offload_param nvme: the shards of the flat buffers move to files (core/zero/nvme_params.h),
// except the first max_in_cpu elements, which stay in host memory (DeepSpeed's max_in_cpu: a prefix
// of the flat buffers in order), and the persistent buffers, which stay gathered. The frozen
// buffers follow the trainable ones (slots after theirs), except int8 ones
// (zero_quantized_nontrainable_weights), which stay in host memory.
void Engine::move_param_shards_to_nvme() {
  const OffloadConfig& po = impl_->options_.offload_param;
  const bool cpu_model = impl_->buckets_.empty() || impl_->buckets_.front()->params().is_cpu();
  if (po.device == OffloadDevice::kCpu && cpu_model) {
    ZT_LOG_INFO(
        "offload_param cpu: the model is on the CPU, so its shards are in host memory "
        "already (the same code path gathers them to a GPU model)");
  }
  if (po.device != OffloadDevice::kNvme) return;
  // Slot b < T: trainable bucket b; slot T + f: frozen bucket f.
  std::vector<zero::Bucket*> all;
  for (auto& b : impl_->buckets_) all.push_back(b.get());
  for (auto& b : impl_->frozen_buckets_) all.push_back(b.get());
  std::vector<int64_t> numels(all.size(), 0);
  int64_t in_cpu = 0, on_nvme = 0;
  bool cpu_full = false;
  for (size_t b = 0; b < all.size(); ++b) {
    if (all[b]->persistent() || all[b]->options().quantized_storage ||
        all[b]->params().scalar_type() != impl_->options_.compute_dtype)
      continue;
    const int64_t n = all[b]->stepped().size();
    if (!cpu_full && in_cpu + n <= po.max_in_cpu) {
      in_cpu += n;
      continue;
    }
    cpu_full = true;
    numels[b] = n;
    on_nvme += n;
  }
  ZT_LOG_INFO("offload_param nvme: ", on_nvme, " parameter elements of this rank on NVMe, ", in_cpu,
              " in host memory (max_in_cpu ", po.max_in_cpu, ")");
  if (on_nvme == 0) return;
  impl_->param_swapper_ = std::make_unique<zero::NvmeParamSwapper>(
      po, impl_->options_.aio, impl_->rank_, impl_->options_.compute_dtype, numels);
  at::NoGradGuard no_grad;
  for (size_t b = 0; b < all.size(); ++b) {
    if (numels[b] > 0) all[b]->move_shard_to(impl_->param_swapper_.get(), b);
  }
  impl_->param_swapper_->wait_writes();
}

// fp16/bf16: the flat buffers (and with them the parameters) become 16-bit copies of the fp32
// values the masters were taken from; frozen parameters and floating buffers are cast too.
// Stage 3 then releases every non-persistent buffer: from here on only shards are resident.
void Engine::cast_model_to_compute_dtype() {
  const at::ScalarType cd = impl_->options_.compute_dtype;
  at::NoGradGuard no_grad;
  zero::WaitClock unused;
  for (auto* list : {&impl_->buckets_, &impl_->frozen_buckets_}) {
    for (auto& b : *list) {
      if (cd != at::kFloat) b->cast_params(cd);
      if (impl_->options_.stage == 3) b->release_params(unused);
    }
  }
  if (cd == at::kFloat) return;
  for (auto& [name, p] : impl_->loose_frozen_) {
    if (p.is_floating_point()) p.set_data(p.detach().to(cd));
  }
  for (auto& buf : impl_->model_->buffers(/*recurse=*/true)) {
    if (buf.is_floating_point()) buf.set_data(buf.detach().to(cd));
  }
}

bool Engine::is_gradient_accumulation_boundary() const {
  return (impl_->micro_steps_ + 1) % impl_->options_.gradient_accumulation_steps == 0;
}

at::Tensor Engine::forward(const std::function<at::Tensor()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  begin_checkpointed_forward();  // number_checkpoints counts per forward pass
  const bool counted = impl_->flops_ && at::GradMode::is_enabled();  // evaluation is not
  if (counted) impl_->flops_->begin_forward(impl_->global_step_);
  at::Tensor out;
  {
    profile::ModuleScope model_scope(*impl_->model_);
    impl_->gather_->gather_unit(impl_->gather_->root(), /*wait=*/true);
    out = fn();
  }
  if (counted) impl_->flops_->end_forward();
  if (!(at::GradMode::is_enabled() && out.requires_grad()) && !impl_->gather_->in_scope()) {
    impl_->gather_->release_all();  // evaluation: no backward will follow
  }
  impl_->breakdown_.forward += seconds_since(start);
  return out;
}

void Engine::backward(const at::Tensor& loss) {
  ZT_CHECK(loss.defined() && loss.numel() == 1, "engine.backward needs a scalar loss");
  const auto start = std::chrono::steady_clock::now();
  impl_->in_backward_ = true;
  impl_->gather_->set_in_backward(true);
  // fp16: the loss is multiplied by the loss scale (in fp32, so the product itself cannot
  // overflow); the gradients are unscaled at the step, fused with the inf/NaN check.
  const double factor = loss_scale() / impl_->options_.gradient_accumulation_steps;
  at::Tensor scaled = loss;
  if (impl_->scaler_) {
    scaled = loss.to(at::kFloat) * factor;
  } else if (factor != 1.0) {
    scaled = loss * factor;
  }
  // Stages 2-3 reduce every micro-step; stages 0-1 only on the accumulation boundary.
  impl_->grad_sync_->begin_backward(impl_->options_.stage >= 2 ||
                                    is_gradient_accumulation_boundary());
  if (impl_->flops_) impl_->flops_->begin_backward();
  try {
    scaled.backward();
  } catch (...) {
    if (impl_->flops_) impl_->flops_->end_backward();
    impl_->in_backward_ = false;
    impl_->gather_->set_in_backward(false);
    throw;
  }
  if (impl_->flops_) impl_->flops_->end_backward();
  impl_->gather_->set_in_backward(false);
  finish_backward();
  impl_->in_backward_ = false;
  impl_->breakdown_.backward += seconds_since(start);
}

void Engine::on_bucket_complete(size_t b) {
  // Stage 3: every parameter of this bucket has its gradient, so no backward node needs them
  // anymore. The root unit stays gathered until backward ends.
  if (impl_->buckets_[b]->unit() != impl_->gather_->root()) impl_->gather_->release_bucket(b);
}

void Engine::finish_backward() {
  impl_->grad_sync_->finish_backward();
  if (!impl_->gather_->in_scope()) impl_->gather_->release_all();
}

void Engine::step() {
  const bool boundary = is_gradient_accumulation_boundary();
  ++impl_->micro_steps_;
  if (!boundary) return;
  const auto start = std::chrono::steady_clock::now();
  const zero::StepOutcome outcome =
      impl_->sharded_step_->step(get_lr(), impl_->scaler_.get(), impl_->global_step_);
  for (auto& b : impl_->buckets_) b->zero_grads();
  if (impl_->host_cache_.held) zero::end_of_host_cache_step();
  ++impl_->global_step_;
  if (outcome.skipped) {
    // Skipped on every rank; the LR schedule does not advance.
    ++impl_->skipped_steps_;
    ZT_LOG_INFO("step ", impl_->global_step_ - 1,
                ": inf/NaN gradients, step skipped; loss scale now ", loss_scale());
  } else {
    impl_->last_grad_norm_ = outcome.grad_norm;
  }
  impl_->breakdown_.step += seconds_since(start);
  if (impl_->flops_) impl_->flops_->end_step(impl_->global_step_, seconds_since(start));
  if (impl_->options_.wall_clock_breakdown && impl_->options_.steps_per_print > 0 &&
      impl_->global_step_ % impl_->options_.steps_per_print == 0) {
    log_breakdown();
  }
}

// DeepSpeed's wall_clock_breakdown: where the time of the last steps_per_print optimizer steps
// went, in milliseconds per optimizer step, on rank 0.
void Engine::log_breakdown() {
  const double n = impl_->options_.steps_per_print;
  const double comm = impl_->clock_.seconds() - impl_->breakdown_.comm_wait_at_start;
  ZT_LOG_INFO("time (ms/step) at step ", impl_->global_step_, ": forward ",
              impl_->breakdown_.forward * 1e3 / n, " | backward ",
              impl_->breakdown_.backward * 1e3 / n, " | step ", impl_->breakdown_.step * 1e3 / n,
              " | comm wait ", comm * 1e3 / n);
  impl_->breakdown_ = Impl::Breakdown{};
  impl_->breakdown_.comm_wait_at_start = impl_->clock_.seconds();
}

void Engine::zero_grad() {
  ZT_CHECK(!impl_->in_backward_, "engine.zero_grad() called during backward");
  for (auto& b : impl_->buckets_) b->zero_grads();
}

double Engine::get_lr() const {
  // Skipped (overflow) steps do not advance the schedule.
  return impl_->options_.lr_schedule
             ? impl_->options_.lr_schedule(impl_->global_step_ - impl_->skipped_steps_)
             : impl_->options_.hyper.lr;
}

void Engine::train(bool on) {
  impl_->model_->train(on);
}

MemoryReport Engine::memory() const {
  MemoryReport m;
  for (const auto& b : impl_->buckets_) {
    const int64_t full = b->full_param_bytes();
    const bool sharded = impl_->options_.stage == 3 && !b->persistent();
    if (!b->shard_on_nvme()) m.param_bytes += sharded ? full / impl_->shard_comm_->size() : full;
    m.param_bytes += b->secondary_bytes();
    m.grad_bytes += b->grad_bytes();
  }
  for (const auto& b : impl_->frozen_buckets_) {
    m.frozen_param_bytes += b->resident_bytes() + b->secondary_bytes();
  }
  for (const auto& [name, p] : impl_->loose_frozen_) {
    m.frozen_param_bytes += p.numel() * static_cast<int64_t>(p.element_size());
  }
  m.optimizer_state_bytes = impl_->sharded_step_->optimizer_state_bytes();
  m.master_bytes = impl_->sharded_step_->master_bytes();
  m.nvme_bytes = impl_->sharded_step_->nvme_bytes();
  m.nvme_buffer_bytes = impl_->sharded_step_->nvme_buffer_bytes();
  if (impl_->param_swapper_) {
    m.nvme_bytes += impl_->param_swapper_->nvme_bytes();
    m.nvme_buffer_bytes += impl_->param_swapper_->buffer_bytes();
  }
  if (impl_->gather_) {
    m.gathered_param_bytes = impl_->gather_->gathered_bytes();
    m.peak_gathered_param_bytes = impl_->gather_->peak_gathered_bytes();
  }
  return m;
}

std::vector<Engine::ShardState> Engine::shard_states() {
  std::vector<ShardState> out;
  for (size_t b = 0; b < impl_->buckets_.size(); ++b) {
    out.push_back({&impl_->buckets_[b]->layout(), impl_->buckets_[b]->stepped(),
                   impl_->sharded_step_->masters().resident(b),
                   impl_->sharded_step_->optimizer(b)});
  }
  return out;
}

zero::MasterStore& Engine::master_store() const {
  return impl_->sharded_step_->masters();
}

void Engine::sync_params_from_masters() {
  at::NoGradGuard no_grad;
  impl_->sharded_step_->copy_masters_to_params();
  for (auto& b : impl_->buckets_) b->publish_params(*impl_->shard_comm_, impl_->clock_);
}

void Engine::restore_counters(int64_t global_step, int64_t skipped_steps, int64_t micro_steps) {
  impl_->global_step_ = global_step;
  impl_->skipped_steps_ = skipped_steps;
  impl_->micro_steps_ = micro_steps;
  for (auto& b : impl_->buckets_) b->zero_grads();
}

std::vector<std::pair<std::string, at::Tensor>> Engine::named_parameters_by_unit() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& unit : impl_->plan_.units) {
    out.insert(out.end(), unit->params.begin(), unit->params.end());
  }
  for (const auto& b : impl_->frozen_buckets_) {
    for (const auto& e : b->layout().entries()) out.emplace_back(e.name, e.param);
  }
  out.insert(out.end(), impl_->loose_frozen_.begin(), impl_->loose_frozen_.end());
  return out;
}

void Engine::for_each_full_parameter(
    const std::function<void(const std::string&, const at::Tensor&)>& fn) {
  at::NoGradGuard no_grad;
  for (size_t u = 0; u < impl_->plan_.units.size(); ++u) {
    impl_->gather_->gather_unit(u, /*wait=*/true);
    for (const auto& [name, param] : impl_->plan_.units[u]->params) fn(name, param);
    if (!impl_->gather_->in_scope()) impl_->gather_->release_unit(u);
  }
  // Frozen buffers one at a time, so at most one is gathered here.
  for (auto& b : impl_->frozen_buckets_) {
    const bool was_gathered = b->gathered();
    b->start_param_gather(*impl_->shard_comm_, impl_->hpz_comm_.get());
    b->finish_param_gather(impl_->clock_);
    for (const auto& e : b->layout().entries()) fn(e.name, e.param);
    if (!was_gathered) b->release_params(impl_->clock_);
  }
  for (const auto& [name, p] : impl_->loose_frozen_) fn(name, p);
}

void Engine::for_each_frozen_value(
    const std::function<void(const std::string&, const at::Tensor&)>& fn) {
  at::NoGradGuard no_grad;
  for (auto& b : impl_->frozen_buckets_) {
    const at::Tensor values = b->values(*impl_->shard_comm_, impl_->clock_);
    for (const auto& e : b->layout().entries()) {
      fn(e.name, values.narrow(0, e.range.begin, e.range.size()).view(e.param.sizes()));
    }
  }
  for (const auto& [name, p] : impl_->loose_frozen_) fn(name, p);
}

void Engine::load_frozen(const std::map<std::string, at::Tensor>& values) {
  at::NoGradGuard no_grad;
  for (auto& b : impl_->frozen_buckets_) {
    // Parameters missing from `values` keep what they hold.
    at::Tensor full = b->values(*impl_->shard_comm_, impl_->clock_);
    for (const auto& e : b->layout().entries()) {
      auto it = values.find(e.name);
      if (it != values.end())
        full.narrow(0, e.range.begin, e.range.size()).copy_(it->second.reshape({-1}));
    }
    b->assign(full, impl_->clock_);
  }
  for (auto& [name, p] : impl_->loose_frozen_) {
    auto it = values.find(name);
    if (it != values.end()) p.detach().copy_(it->second);
  }
}

Engine::GatheredParameters::GatheredParameters(Engine& engine, bool write_back)
    : engine_(engine), write_back_(write_back) {
  engine_.impl_->gather_->open_scope();
}

Engine::GatheredParameters::~GatheredParameters() {
  Impl& e = *engine_.impl_;
  if (write_back_) {
    at::NoGradGuard no_grad;
    for (auto& b : e.buckets_) b->keep_shard();
    for (auto& b : e.frozen_buckets_) b->keep_shard();
    e.sharded_step_->copy_params_to_masters();
  }
  if (e.gather_->close_scope() && !e.in_backward_) e.gather_->release_all();
}

}  // namespace zt
