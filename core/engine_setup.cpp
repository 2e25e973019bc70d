// zt::Engine's construction: the options checked, the process groups, the buckets and the parts
// plan_bucket (core/zero/bucket_plan.h) chose for them, the frozen buffers, the initial state
// broadcast, the compute dtype and the NVMe shards. core/engine.cpp runs what is built here.

#include <string>
#include <unordered_set>

#include <ATen/ATen.h>

#include "base/env_vars.h"
#include "base/error.h"
#include "base/heap_trim.h"
#include "base/logging.h"
#include "core/activations/activation_checkpoint.h"
#include "core/engine_impl.h"
#include "core/zero/partitioned_init.h"
#include "parallel/env.h"
#include "parallel/tensor_parallel.h"

namespace zt {
namespace {

// DeepSpeed's gradient averaging (gradient_reduction_w_predivide): with prescale_gradients the
// whole 1/N is applied before the sum; otherwise 1/f before it and f/N after it (f =
// gradient_predivide_factor, 1 by default, so the default is sum, then 1/N).
std::pair<double, double> reduce_scales(const EngineOptions& o, int world) {
  if (o.prescale_gradients) return {1.0 / world, 1.0};
  const double f = o.gradient_predivide_factor;
  return {f != 1.0 ? 1.0 / f : 1.0, f != world ? f / world : 1.0};
}

}  // namespace

Engine::Engine(std::shared_ptr<torch::nn::Module> model, EngineOptions options,
               std::shared_ptr<dist::Communicator> comm,
               std::shared_ptr<zero::PartitionedInit> partitioned,
               std::shared_ptr<const dist::Topology> topology)
    : impl_(std::make_unique<Impl>()) {
  impl_->model_ = std::move(model);
  impl_->options_ = std::move(options);
  impl_->comm_ = std::move(comm);
  ZT_CHECK(impl_->model_ != nullptr, "Engine: model is null");
  configure_activation_checkpointing(impl_->options_.activation_checkpointing);
  ZT_CHECK(impl_->comm_ != nullptr, "Engine: communicator is null");
  check_engine_options(impl_->options_);
  if (impl_->options_.compute_dtype == at::kHalf) {
    impl_->scaler_ = std::make_unique<DynamicLossScaler>(impl_->options_.fp16);
  }
  if (!topology) {
    topology =
        dist::make_topology(impl_->comm_,
                            topology_options(impl_->options_, impl_->options_.hierarchical_reduce,
                                             impl_->options_.sequence_parallel_size,
                                             impl_->options_.tensor_parallel_size,
                                             impl_->options_.expert_parallel_size),
                            dist::Env::from_lookup(::zt::env::get));
  }
  ZT_CHECK(topology->world == impl_->comm_ || topology->all == impl_->comm_,
           "Engine: the topology was made for another communicator than the engine's");
  ZT_CHECK(topology->tensor_parallel_size() == impl_->options_.tensor_parallel_size,
           "Engine: tensor_parallel_size is ", impl_->options_.tensor_parallel_size,
           " but the topology's tensor groups have ", topology->tensor_parallel_size(), " ranks");
  ZT_CHECK(topology->expert_parallel_size() == impl_->options_.expert_parallel_size,
           "Engine: expert_parallel_size is ", impl_->options_.expert_parallel_size,
           " but the topology's expert groups have ", topology->expert_parallel_size(), " ranks");
  // ZeRO runs over the ranks of this rank's tensor (expert) index, every rank without a split;
  // rank_ stays the job's rank, which names this rank's files.
  impl_->comm_ = topology->world;
  impl_->rank_ = topology->all->rank();
  impl_->world_ = impl_->comm_->size();
  ZT_CHECK(topology->sequence_parallel_size() == impl_->options_.sequence_parallel_size,
           "Engine: sequence_parallel_size is ", impl_->options_.sequence_parallel_size,
           " but the topology's sequence groups have ", topology->sequence_parallel_size(),
           " ranks");
  // The sum is over every rank whatever the sharding (the replica sum, or the expert group's sum
  // of the replicated parameters, completes it); the average is over the data-parallel ranks
  // (DeepSpeed divides by dp_world_size / sequence_parallel_size, and an expert's gradient, summed
  // over its expert-data-parallel group, by the whole data-parallel size too).
  const auto [pre_scale, post_scale] =
      reduce_scales(impl_->options_, topology->data_parallel_size());
  impl_->topology_ = topology;
  if (topology->split()) {
    // Every rank's extent of each split parameter, before the layout reshapes them.
    const auto named = impl_->model_->named_parameters();
    std::vector<int64_t> mine;
    for (const auto& [name, dim] : impl_->options_.tensor_split_params) {
      const at::Tensor* p = named.find(name);
      ZT_CHECK(p != nullptr, "Engine: tensor_split_params names ", name,
               ", which is no parameter of the model");
      mine.push_back(p->size(dim));
    }
    auto sizes = dist::gather_sizes(mine, *topology->split());
    size_t i = 0;
    for (const auto& kv : impl_->options_.tensor_split_params) {
      impl_->tensor_slices_[kv.first] = std::move(sizes[i++]);
    }
    // The dealt parameters in the model's order, which is the same on every rank of the group:
    // their names there, and their shapes, which must be the same.
    std::vector<std::string> dealt;
    std::vector<int64_t> shapes, owner;  // owner: which of `dealt` each shape entry belongs to
    for (const auto& p : named) {
      if (!impl_->options_.dealt_params.count(p.key())) continue;
      dealt.push_back(p.key());
      shapes.push_back(p.value().dim());
      for (int64_t extent : p.value().sizes()) shapes.push_back(extent);
      owner.resize(shapes.size(), static_cast<int64_t>(dealt.size()) - 1);
    }
    ZT_CHECK(dealt.size() == impl_->options_.dealt_params.size(),
             "Engine: dealt_params names a parameter the model does not have");
    dist::Communicator& group = *topology->split();
    const auto counts = dist::gather_sizes(
        {static_cast<int64_t>(dealt.size()), static_cast<int64_t>(shapes.size())}, group);
    for (int r = 0; r < group.size(); ++r) {
      ZT_CHECK(counts[0][static_cast<size_t>(r)] == static_cast<int64_t>(dealt.size()) &&
                   counts[1][static_cast<size_t>(r)] == static_cast<int64_t>(shapes.size()),
               "Engine: the ranks of the split group deal their parameters differently (rank ", r,
               ": ", counts[0][static_cast<size_t>(r)], " parameters, this rank: ", dealt.size(),
               ")");
    }
    auto names = dist::gather_names(dealt, group);
    const auto all_shapes = dist::gather_sizes(shapes, group);
    for (size_t k = 0; k < shapes.size(); ++k) {
      for (size_t r = 0; r < all_shapes[k].size(); ++r) {
        ZT_CHECK(all_shapes[k][r] == shapes[k], "Engine: dealt parameter ",
                 dealt[static_cast<size_t>(owner[k])], " has another shape on rank ", r,
                 " of the split group (", names[static_cast<size_t>(owner[k])][r], ")");
      }
    }
    for (size_t k = 0; k < dealt.size(); ++k) impl_->dealt_names_[dealt[k]] = std::move(names[k]);
  }
  impl_->shard_comm_ = topology->shard;
  impl_->replica_comm_ = topology->replica;
  impl_->hpz_comm_ = topology->hpz;

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
  (bo.stage == 3 ? bo.quantized_reduce : bo.hierarchical_reduce) = topology->reduce_nodes.get();
  bo.hierarchical_gather = topology->gather_nodes.get();
  bo.grad_dtype = impl_->options_.grad_accum_dtype;
  bo.comm_dtype = impl_->options_.communication_dtype.value_or(impl_->options_.grad_accum_dtype);
  bo.pre_reduce_scale = pre_scale;
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
  // With the optimizer on NVMe, a model whose gradients live in host memory keeps its reduced
  // gradient slices in the optimizer's chunk files too, as DeepSpeed's stage 3 swaps its gradient
  // partitions there (core/zero/grad_spill.h): host memory then holds only the slices being
  // reduced. Under MiCS and tensor or expert splits the step sums the slices again across
  // groups, so there they stay in memory.
  bool spill_grads = bo.release_grad_shard && impl_->options_.optimizer_on_nvme();
  if (spill_grads && (impl_->replica_comm_ || topology->split())) {
    spill_grads = false;
    if (impl_->rank_ == 0) {
      ZT_LOG_WARN("offload_optimizer.device nvme: the reduced gradients stay in host memory under ",
                  impl_->replica_comm_ ? "mics_shard_size" : "tensor or expert parallelism",
                  " (its step sums them across groups); only the master and moments are on NVMe");
    }
  }
  impl_->sharded_step_ = std::make_unique<zero::ShardedStep>(
      impl_->options_, impl_->buckets_, *impl_->shard_comm_, impl_->replica_comm_.get(),
      impl_->rank_, impl_->clock_, post_scale, spill_grads);
  if (topology->split()) {
    impl_->sharded_step_->set_split_group(topology->split().get(),
                                          /*replicated_differ=*/topology->expert != nullptr);
  }
  broadcast_initial_state();
  cast_model_to_compute_dtype();
  move_param_shards_to_nvme();
  impl_->gather_ = std::make_unique<zero::ParamGather>(
      impl_->plan_, impl_->buckets_, impl_->frozen_buckets_, *impl_->shard_comm_,
      impl_->hpz_comm_.get(), impl_->clock_, impl_->options_.stage == 3,
      impl_->options_.stage3_prefetch_bucket_size, impl_->options_.stage3_max_reuse_distance);
  impl_->grad_sync_ = std::make_unique<zero::GradSync>(
      impl_->buckets_, *impl_->shard_comm_, impl_->clock_, impl_->options_.max_inflight_reductions,
      [this](size_t b) { on_bucket_complete(b); },
      // The last micro-batch's reduction makes the gradient the step takes.
      [this](size_t b) {
        if (is_gradient_accumulation_boundary()) {
          impl_->sharded_step_->gradient_reduced(b, step_hyper());
        }
      },
      impl_->plan_.units.size() - 1);
  if (impl_->options_.wall_clock_breakdown) {
    c10::Device device(c10::kCPU);
    for (const at::Tensor& p : impl_->model_->parameters()) {
      device = p.device();
      break;
    }
    impl_->timer_ = std::make_unique<profile::PhaseTimer>(device);
    impl_->comm_wait_at_report_ = impl_->clock_.seconds();
  }
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
      topology->split() ? detail::str(" of each ", topology->expert ? "expert" : "tensor",
                                      " index (", topology->split_size(), " indices)")
                        : std::string(),
      ", ", impl_->buckets_.size(), " flat buffer(s) in ", impl_->plan_.units.size(),
      " unit(s); model states per rank: params ", m.param_bytes, " B",
      m.frozen_param_bytes > 0 ? detail::str(" (+ ", m.frozen_param_bytes, " B frozen)")
                               : std::string(),
      ", grads ", m.grad_bytes, " B, optimizer ", m.optimizer_state_bytes + m.master_bytes, " B",
      m.nvme_bytes > 0 ? detail::str(" (+ ", m.nvme_bytes, " B on NVMe through ",
                                     m.nvme_buffer_bytes, " B of buffers)")
                       : std::string());
  // What construction freed (a model cast or sent to NVMe shard by shard, the whole tensors a
  // model built outside the engine held before its flat buffers and shards took them) is not a
  // step's: kept, it would sit idle through the first steps, where a CPU model's memory peaks.
  // The host cache lets go of its blocks, and the C library of its free heap pages
  // (base/heap_trim.h).
  if (impl_->host_cache_.held) zero::empty_host_cache();
  trim_heap();
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

const dist::Communicator& Engine::shard_communicator() const {
  return *impl_->shard_comm_;
}
int Engine::replica_index() const {
  return impl_->replica_comm_ ? impl_->replica_comm_->rank() : 0;
}
const dist::Topology& Engine::topology() const {
  return *impl_->topology_;
}

const std::map<std::string, std::vector<int64_t>>& Engine::tensor_slices() const {
  return impl_->tensor_slices_;
}

const std::map<std::string, std::vector<std::string>>& Engine::dealt_names() const {
  return impl_->dealt_names_;
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
  broadcast_replicated_over_split();
  for (auto& b : impl_->buckets_) b->keep_shard();
  for (auto& b : impl_->frozen_buckets_) b->keep_shard();
  impl_->sharded_step_->init_masters();
}

// Under a tensor or expert split each index is its own ZeRO world, so the broadcast above reached
// only this index's ranks. The parameters every index holds whole (embeddings, norms, routers,
// attention under an expert split) and the buffers then come from the split group's first rank
// too, so every rank starts from rank 0's values, as without a split, whatever seed each rank
// built its model with; the split parameters stay each index's own.
void Engine::broadcast_replicated_over_split() {
  dist::Communicator* split = impl_->topology_->split().get();
  if (split == nullptr) return;
  const EngineOptions& o = impl_->options_;
  std::vector<at::Tensor> pieces;
  for (auto* list : {&impl_->buckets_, &impl_->frozen_buckets_}) {
    for (auto& b : *list) {
      if (b->from_partitioned_construction()) continue;
      at::Tensor flat = b->params();
      for (const auto& e : b->layout().entries()) {
        if (!o.split_over_group(e.name)) {
          pieces.push_back(flat.narrow(0, e.range.begin, e.range.size()));
        }
      }
    }
  }
  for (auto& [name, p] : impl_->loose_frozen_) {
    if (!o.split_over_group(name) && p.is_contiguous()) pieces.push_back(p.detach());
  }
  for (auto& buf : impl_->model_->buffers(/*recurse=*/true)) {
    if (buf.is_contiguous()) pieces.push_back(buf);
  }
  std::vector<dist::WorkPtr> works;
  for (at::Tensor& t : pieces) works.push_back(split->broadcast(t, 0));
  for (auto& w : works) w->wait();
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
  // The host shards just written to files are free; the constructor's end gives their pages back.
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
      b->release_params(unused);  // no-op where the full buffer stays resident
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

}  // namespace zt
