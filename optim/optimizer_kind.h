#pragma once
// Which optimizer steps a shard (optim/shard_optimizer.h), as an enum the config reads once
// (core/config/config.h names it OptimizerType). No LibTorch here, so the config's header stays
// free of it.

#include <string>

namespace zt::optim {

// The optimizers: Adam, AdamW, SGD, Lion, Lamb (any device; ATen ops per group), CpuAdam (fused
// SIMD pass on CPU), Adam8bit (block-wise quantized state, CPU, or the plugin's kernel on CUDA),
// FusedAdam (CUDA kernel of the plugin), Muon (DeepSpeed's MuonWithAuxAdam, optim/muon.h). CpuAdam
// and FusedAdam are Adam/AdamW's update in one pass over memory; resolve_for_device picks them.
enum class OptimizerKind {
  kAdam,
  kAdamW,
  kSgd,
  kLion,
  kLamb,
  kCpuAdam,
  kAdam8bit,
  kFusedAdam,
  kMuon
};

// "Adam", "AdamW", "SGD", "Lion", "Lamb", "CpuAdam", "Adam8bit", "FusedAdam", "Muon".
const char* optimizer_name(OptimizerKind kind);
// The kind optimizer_name calls `name`, or a zt::Error listing the names.
OptimizerKind optimizer_kind(const std::string& name);

}  // namespace zt::optim
