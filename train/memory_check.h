#pragma once
// Refusing, before the model is built, a run whose memory plan (core/plan/memory_plan.h) does
// not fit the machine, with one line naming the place that overflows, its largest part, and the
// config changes that would fit, each found by planning the run again with it.
//
// Limits (memory_plan block of the config, core/config/config.h), per rank:
//   device  memory_plan.device_limit_gib, else a CUDA device's free memory; none for the test
//           device (zttest is host memory)
//   host    memory_plan.host_limit_gib, else MemAvailable (/proc/meminfo), shared by the ranks of
//           the node (divided by LOCAL_WORLD_SIZE); pinned host memory counts here too, and on a
//           CPU model everything the plan puts on the device
//   nvme    memory_plan.nvme_limit_gib, else the free space at the config's nvme_path, shared by
//           the node's ranks
//
// The changes tried, alone and then two at a time: ZeRO stage 3; offload_optimizer to cpu, then
// nvme; at stage 3 offload_param to cpu, then nvme; sub_group_size 1e8, 1e7 or 1e6 with the
// optimizer on NVMe (smaller swap buffers); half of reduce_bucket_size; activation checkpointing
// (through the program's replan).

#include <array>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include "core/config/config.h"
#include "core/plan/memory_plan.h"
#include "parallel/env.h"

namespace zt::train {

struct MemoryLimits {
  std::array<int64_t, plan::kPlaces> bytes{-1, -1, -1, -1};  // per rank; -1: no limit
  std::array<std::string, plan::kPlaces> source;             // where each limit came from
  int ranks_sharing = 1;                                     // host and NVMe: the node's ranks
};

// The plan's view of a built model: the parameters of each unit (a submodule name; a parameter
// belongs to the innermost unit holding it, as core/zero/units.cpp assigns it) in module order,
// then the root's; frozen ones (requires_grad false) as bytes. No activations. `split`: the
// parameters a tensor or expert split gave this rank a part of (InitOptions::tensor_split and
// expert_dealt).
plan::ModelMemory model_memory(const torch::nn::Module& model,
                               const std::vector<std::string>& units,
                               const std::set<std::string>& split = {});

MemoryLimits memory_limits(const Config& config, const c10::Device& device, const dist::Env& env);

// Plans the run again with a changed config; `checkpointing`: with activation checkpointing.
using Replan = std::function<plan::MemoryPlan(const Config& config, bool checkpointing)>;

// The refusal's one line, or "" when the plan fits the limits.
std::string memory_refusal(const plan::MemoryPlan& plan, const MemoryLimits& limits,
                           const Config& config, bool checkpointing, const Replan& replan);

// Logs the plan (rank 0) and refuses (a zt::Error) a run that does not fit, unless
// memory_plan.start_anyway (then the refusal is a warning). Nothing when memory_plan.enabled is
// false.
void check_memory_plan(const plan::MemoryPlan& plan, const Config& config,
                       const c10::Device& device, const dist::Env& env, bool checkpointing,
                       const Replan& replan);

// The run's plan, replan(config, false), checked by check_memory_plan with the same replan.
plan::MemoryPlan plan_and_check(const Config& config, const c10::Device& device,
                                const dist::Env& env, bool checkpointing, const Replan& replan);

}  // namespace zt::train
