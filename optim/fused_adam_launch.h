#pragma once
// The ABI between FusedAdam (zt_optim) and its kernel in the CUDA plugin: plain structs and the
// launcher's signature, nothing from ATen, so nvcc compiles optim/fused_adam.cu without LibTorch.

#include <cstdint>

namespace zt::optim {

inline constexpr const char* kFusedAdamSymbol = "zt_fused_adam";
inline constexpr int kFusedAdamMaxGroups = 64;

// One group of one launch; constants as in cpu_adam_kernel.h's AdamArgs.
struct FusedAdamGroup {
  int64_t begin, end;  // elements of the shard
  float beta1, beta2, eps;
  float neg_step_size;    // -lr / (1 - beta1^t)
  float inv_sqrt_bc2;     // 1 / sqrt(1 - beta2^t)
  float decay_factor;     // AdamW: 1 - lr * wd, else 1
  float l2_weight_decay;  // Adam: wd, else 0
  float unused = 0;
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

// The plugin's entry point: enqueues the kernel on `stream` (a cudaStream_t; nullptr: LibTorch's
// current stream of the current device) and returns nullptr, or the CUDA error's text.
using FusedAdamLauncher = const char* (*)(const FusedAdamLaunch* launch, void* stream);

}  // namespace zt::optim
