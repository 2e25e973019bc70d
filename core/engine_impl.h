#pragma once
// Engine::Impl, the engine's state, shared by the two files that implement zt::Engine:
// core/engine_setup.cpp builds it (the process groups, the buckets and their parts, the initial
// state), core/engine.cpp runs it (forward, backward, the step, checkpoint access). Private to
// them: programs include core/engine.h, which keeps it behind a pointer.

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/engine.h"
#include "core/precision/loss_scaler.h"
#include "core/profile/flops_profiler.h"
#include "core/profile/phase_timer.h"
#include "core/zero/bucket.h"
#include "core/zero/grad_sync.h"
#include "core/zero/host_caching_allocator.h"
#include "core/zero/nvme_params.h"
#include "core/zero/param_gather.h"
#include "core/zero/sharded_step.h"
#include "core/zero/unit_buckets.h"
#include "core/zero/units.h"
#include "core/zero/wait_clock.h"
#include "parallel/communicator.h"
#include "parallel/topology.h"

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
  // The process groups (parallel/topology.h). Hybrid sharding: the state is sharded over
  // shard_comm_ and replicated across replica_comm_; otherwise shard_comm_ is comm_ and
  // replica_comm_ is null. hpz_comm_: ZeRO++ hpZ's secondary partition group, or null.
  std::shared_ptr<const dist::Topology> topology_;
  std::map<std::string, std::vector<int64_t>> tensor_slices_;    // Engine::tensor_slices
  std::map<std::string, std::vector<std::string>> dealt_names_;  // Engine::dealt_names
  std::shared_ptr<dist::Communicator> shard_comm_, replica_comm_, hpz_comm_;
  int rank_ = 0;
  int world_ = 1;

  zero::UnitPlan plan_;
  std::unique_ptr<zero::NvmeParamSwapper> param_swapper_;  // offload_param nvme: shard files
  std::vector<std::unique_ptr<zero::Bucket>> buckets_;
  // Stage 3: the units' frozen parameters, sharded (unit_buckets.h: make_frozen_buckets);
  // loose_frozen_ are the frozen parameters outside them (every one below stage 3), whole on every
  // rank.
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
  // wall_clock_breakdown: the phases' times since the last report (null when off), and the
  // communication wait clock's reading at that report.
  std::unique_ptr<profile::PhaseTimer> timer_;
  double comm_wait_at_report_ = 0;
};

}  // namespace zt
