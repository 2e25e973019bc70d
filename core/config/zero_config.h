#pragma once
// zero_optimization as the config reads it and the engine takes it: EngineOptions
// (core/engine_options.h) is this block plus the engine's other options, so the stage, bucket
// sizes, offload blocks and sub_group_size have one shape and one set of defaults. Fields the
// engine does not act on (overlap_comm, contiguous_gradients, allgather_bucket_size, ...) are
// reported by the config check (core/config/schema.h), not silently taken.

#include <cstdint>
#include <string>

#include "core/defaults.h"

namespace zt {

enum class OffloadDevice { kNone, kCpu, kNvme };

// zero_optimization.offload_optimizer / offload_param. Defaults are DeepSpeed's (core/
// defaults.h); buffer_count is 4 for the optimizer and 5 for parameters.
//  offload_optimizer (stages 1-3): the fp32 master and optimizer state of this rank's stepped
//    ranges live in (pinned) host memory (cpu), or in files under nvme_path (nvme, ZeRO-Infinity),
//    cut into chunks of sub_group_size elements streamed through buffer_count host buffers at each
//    step (core/zero/nvme_optimizer.h; CPUAdam only).
//  offload_param (stage 3): where the 16-bit parameter shards live between uses
//    (core/zero/bucket.h, core/zero/nvme_params.h): with the model (none), in host memory (cpu;
//    pinned with pin_memory when the model is on a GPU), or in files under nvme_path (nvme),
//    except the first max_in_cpu elements (flat buffers in order), which stay in host memory;
//    read ahead of use through buffer_count buffers of at most buffer_size elements.
struct OffloadConfig {
  OffloadDevice device = OffloadDevice::kNone;
  std::string nvme_path;   // required when device is nvme
  bool pin_memory = true;  // DeepSpeed 0.19's default (offload_config.py)
  int64_t buffer_count = defaults::kParamBufferCount;
  int64_t buffer_size = defaults::kParamBufferSize;  // offload_param only: elements per buffer
  int64_t max_in_cpu = defaults::kMaxInCpu;  // offload_param only: elements kept in CPU memory
  double ratio = 1.0;  // offload_optimizer only: share of the states offloaded
  // offload_optimizer with device nvme only: overlap reading the next chunk (sub_group_size
  // elements) / writing the previous one with the step of the current one.
  bool pipeline_read = false;
  bool pipeline_write = false;
};

// zero_optimization. Sizes count elements, as in DeepSpeed.
struct ZeroConfig {
  int stage = 0;              // 0 = DDP, 1 = optimizer states, 2 = + grads, 3 = + params
  bool overlap_comm = false;  // DeepSpeed: false, but true by default at stage 3
  bool contiguous_gradients = true;
  int64_t reduce_bucket_size = defaults::kReduceBucketSize;  // elements per flat buffer / bucket
  int64_t allgather_bucket_size = defaults::kReduceBucketSize;
  bool reduce_scatter = true;
  bool allgather_partitions = true;
  int64_t stage3_prefetch_bucket_size = defaults::kPrefetchBucketSize;  // gathered ahead of use
  // Stage 3: flat buffers of fewer elements stay gathered (replicated) instead of sharded.
  int64_t stage3_param_persistence_threshold = 100'000;
  // Stage 3, DeepSpeed's leaf modules: a module whose parameters per layer (parameter count /
  // (1 + modules below it with parameters)) are at most this is fetched whole, as one unit. The
  // Python front door chooses its units by it (python/zerotorch/engine.py); a C++ program's units
  // are where it calls zt::call_unit, so there it only warns. 0: off.
  int64_t stage3_module_granularity_threshold = 0;
  int64_t stage3_max_live_parameters = 1'000'000'000;
  int64_t stage3_max_reuse_distance = 1'000'000'000;
  // save_16bit_model (core/checkpoint/model_export.h) gathers a stage-3 model's weights; off, it
  // saves nothing at stage 3. Also read under its older name
  // stage3_gather_fp16_weights_on_model_save.
  bool stage3_gather_16bit_weights_on_model_save = false;
  // Hybrid sharding at stage 3 (DeepSpeed's MiCS, PyTorch's HSDP): the model states are sharded
  // within groups of this many consecutive ranks and replicated across the groups; the gradients
  // are reduce-scattered in the group each micro-step and summed across groups once per step.
  // It must divide the number of ranks. <= 0 (DeepSpeed's default -1): shard over every rank.
  int mics_shard_size = -1;
  // MiCS: a shard group spanning nodes gathers in two hops (across the nodes, then inside the
  // node; core/zero/bucket.h). Off: one all-gather over the group.
  bool mics_hierarchical_params_gather = false;
  // ZeRO++ hpZ at stage 3: after a unit's forward gather each rank keeps a secondary copy of its
  // parameters partitioned over this many consecutive ranks (one node's), so the backward's
  // gathers stay inside that group; 2 Ψ / hpz more bytes per rank until the step. 1: off.
  int zero_hpz_partition_size = 1;
  // ZeRO++ qwZ at stage 3: parameter all-gathers move block-quantized int8 values and fp32
  // scales (core/zero/block_quant.h), and the gathered weights carry that error.
  bool zero_quantized_weights = false;
  // ZeRO++ at stage 3: the shards of frozen parameters (requires_grad false) are stored as
  // block-quantized int8 values and fp32 scales, and their gathers move those; the frozen weights
  // the model computes with carry that error from the start (core/zero/block_quant.h).
  bool zero_quantized_nontrainable_weights = false;
  // ZeRO++ qgZ at stage 3 across nodes: the gradient reduce-scatter runs as int8 all-to-alls,
  // inside the node then across (core/zero/quantized_reduce.h); on one node it is a no-op.
  bool zero_quantized_gradients = false;
  int64_t sub_group_size = defaults::kSubGroupSize;
  OffloadConfig offload_optimizer = [] {
    OffloadConfig c;
    c.buffer_count = defaults::kOptimizerBufferCount;
    return c;
  }();
  OffloadConfig offload_param;

  // The fp32 master and optimizer state live on the host (cpu or nvme).
  bool optimizer_offloaded() const { return offload_optimizer.device != OffloadDevice::kNone; }
  bool optimizer_on_nvme() const { return offload_optimizer.device == OffloadDevice::kNvme; }
};

}  // namespace zt
