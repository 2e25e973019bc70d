#pragma once
// The ABI between FusedAdam (zt_optim) and its kernel in the CUDA plugin: plain structs and the
// launcher's signature, nothing from ATen, so nvcc compiles optim/fused_adam.cu without LibTorch.

#include <cstdint>

#include "optim/adam_formula.h"

namespace zt::optim {

inline constexpr const char* kFusedAdamSymbol = "zt_fused_adam";
inline constexpr int kFusedAdamMaxGroups = 64;

// One group of one launch.
struct FusedAdamGroup {
  int64_t begin, end;  // elements of the shard
  AdamConstants c;     // adam_constants() of the group and step, as CpuAdam's
};

// Passed by value to the kernel (well under the 4 KiB parameter limit).
struct FusedAdamLaunch {
  float* param;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  void* half_out;     // fp16/bf16 [N] or nullptr
  int32_t half_kind;  // 0 none, 1 fp16, 2 bf16
  int32_t num_groups;
  FusedAdamGroup groups[kFusedAdamMaxGroups];
};
static_assert(sizeof(FusedAdamLaunch) <= 4096, "kernel parameters are limited to 4 KiB");

// The plugin's entry point: enqueues the kernel on `stream` (a cudaStream_t; nullptr: LibTorch's
// current stream of the current device) and returns nullptr, or the CUDA error's text.
using FusedAdamLauncher = const char* (*)(const FusedAdamLaunch* launch, void* stream);

}  // namespace zt::optim
