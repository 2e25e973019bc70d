#pragma once
// The memory plan: each rank's peak bytes on the device, in host memory (pageable and pinned)
// and on NVMe, computed before anything is built, from the config, the world size and what the
// plan needs to know of the model (ModelMemory: its units' parameter sizes and their activation
// bytes per micro-batch). Where the estimate (core/config/memory_estimate.h) counts model states
// only, the plan follows the engine's schedule through one optimizer step and names every buffer
// alive at the peak:
//
//   persistent   parameters (whole, or the stage-3 shards where offload_param puts them),
//                gradient accumulation buffers, the fp32 master and the optimizer state (where
//                offload_optimizer puts them), the offload paths' pinned slots and swap buffers
//   forward      stage-3 units gathered (the unit, the ones prefetch reaches within
//                stage3_prefetch_bucket_size elements, the root for the whole pass) and the
//                activations kept for backward, unit by unit
//   backward     the same gathers in reverse; each unit's backward transients; gradient staging
//                buffers of the buckets reduced and in flight (at most max_inflight_reductions
//                waited behind); the root's 16-bit gradients (a tied embedding gets its last
//                gradient at the very end); gloo's reduce-scatter copies its input twice while in
//                flight (c10d's ProcessGroupGloo)
//   step         stage 1's reduced slices, and the optimizer's temporaries where ATen's Adam
//                steps a master on the device (optim/adam.h: the square root and its quotient,
//                and the scaled gradient, over the largest parameter-group range of a flat
//                buffer; CpuAdam on the host and FusedAdam on a GPU make none)
//   construction stage 3 with offload_param: the 16-bit shards pass through host memory
//                (pinned beside a device) before they go to their place
//
// Buckets are cut from the units as the engine cuts them (dist::plan_buckets, padding to the
// shard group), so padding and persistence thresholds are exact. The activation bytes come from
// the program (train/activation_probe.h measures one unit on the device); without them the plan
// says so and counts model states and buffers only. Under sequence, tensor or expert
// parallelism the probes run one rank's part of the split layer (its positions, heads, experts),
// its exchanges with them (parallel/mirror_communicator.h); the engine's own part is the expert
// groups' sum of the replicated parameters' gradients at the step.
//
// The device peak is the most the device allocator holds at once (what
// torch.cuda.max_memory_allocated reports); CUDA's caching allocator reserves up to a block more
// per size class on top. On a CPU model the device and host memory are one: every device part is
// host memory.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "core/config/config.h"

namespace zt::plan {

enum class Place { kDevice, kHost, kPinned, kNvme };
inline constexpr int kPlaces = 4;
const char* to_string(Place p);

// Bytes one micro-batch's activations take in a unit, measured or computed by the program.
struct UnitActivations {
  int64_t saved = 0;           // alive after the unit's forward: kept for backward, its output too
  int64_t forward_extra = 0;   // most bytes above `saved` alive during the forward
  int64_t backward_extra = 0;  // most bytes above the live level during its backward
};

struct PlannedParam {
  std::string name;  // as in the model (parameter groups, core/config: parameter_groups)
  int64_t numel = 0;
  // This rank's slice of a tensor split or its experts under expert parallelism (the engine's
  // EngineOptions::tensor_split_params, dealt_params): numel is the rank's own.
  bool split = false;
};

struct PlannedUnit {
  std::string name;
  std::vector<PlannedParam> params;  // trainable parameters, in the module's order
  int64_t frozen_bytes = 0;          // frozen parameters (kept whole)
  UnitActivations activations;
  // A routed unit (zt::RoutedUnit, core/zero/call_unit.h: a layer's experts), declared right
  // after the unit it is inside: gathered within that unit's call by its routing (the plan
  // counts it whole), never prefetched.
  bool routed = false;
};

// Under a tensor or expert split the model is the one rank holds (its slices, its experts), and
// the plan shards it over that rank's ZeRO world (world / tp, or world / ep ranks).
struct ModelMemory {
  // The declared units in forward order, then the root (the parameters outside every unit; its
  // activations: embeddings, head and loss).
  std::vector<PlannedUnit> units;
  // Where the activation bytes come from ("" = not known: the plan leaves them out and says so).
  std::string activations_source;
};

struct PlanPart {
  std::string name;
  Place place = Place::kDevice;
  int64_t bytes = 0;
};

struct MemoryPlan {
  // Every part alive at each place's peak, largest first within a place.
  std::vector<PlanPart> parts;
  std::array<int64_t, kPlaces> peak{};  // by Place
  std::string device_peak_at;           // "forward", "backward" or "step" (and which unit)
  std::vector<std::string> notes;       // what the plan leaves out, keys that do not act
  int64_t peak_at(Place p) const { return peak[static_cast<size_t>(p)]; }
  // A table: one line per part, the totals per place, the notes.
  std::vector<std::string> lines() const;
  // The largest part at `place`.
  PlanPart largest(Place place) const;
};

// device: where the model trains (a CPU model's device parts are host memory). backend: the
// communicator's (parallel/communicator.h: "gloo", "mpi", "nccl", ...), whose collectives may
// hold copies of their tensors.
MemoryPlan plan_memory(const Config& config, int world_size, const ModelMemory& model,
                       const c10::Device& device, const std::string& backend);

// "1.50 GiB" / "12.3 MiB" / "512 B".
std::string format_bytes(int64_t bytes);

}  // namespace zt::plan
