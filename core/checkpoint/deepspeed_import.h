#pragma once
// DeepSpeed checkpoints in: what a DeepSpeed user brings, written as a zerotorch checkpoint
// (core/checkpoint/format.h), which load_checkpoint then loads at any world size, stage and
// offload placement, and which programs built on zt::initialize resume from when it sits in
// their checkpoint.save_dir (train/checkpointing.h).
//
//   zt::import_deepspeed_universal("ds/global_step300_universal", "ckpts");  // ->
//   ckpts/global_step300 zt::load_checkpoint(engine, "ckpts");     // parameters, Adam's moments,
//   step: training resumes
//
//   zt::import_deepspeed_weights("ds/fp32/model.safetensors", "ckpts");       // weights only
//
// Universal checkpoint (weights/deepspeed_universal.h; from a ZeRO stage 0-2 run as it is, from a
// stage-3 run with the step and shapes given, below): every parameter's fp32 master, exp_avg,
// exp_avg_sq, and the step become one rank's checkpoint (world size 1, stage 0), one flat
// buffer per parameter:
//   buffer p:  padded_numel = stepped_end = numel(p), entries {name(p), 0, numel(p)}
//              master (numel(p),) fp32; state "exp_avg", "exp_avg_sq" (numel(p),) fp32, laid out
//              like master; "step" int64 0-d
// so loading reshards it by (parameter name, offset) as any checkpoint saved at another world
// size. The metadata says global_step = step, micro_steps = step * gradient_accumulation_steps,
// and names no optimizer: the state is Adam's (torch.optim.Adam/AdamW, DeepSpeed's FusedAdam and
// DeepSpeedCPUAdam keep the same two moments), and it loads into any Adam-family optimizer
// (AdamW, Adam, CpuAdam, FusedAdam); the hyper-parameters and LR schedule are the zerotorch
// config's, so give it DeepSpeed's. Frozen parameters are not in a universal checkpoint's zero/
// folder and are not imported. The RNG saved is a fresh CPU generator's (DeepSpeed's RNG state
// cannot be carried over), and there is no sampler position: the data order starts over.
//
// Weights (weights/state_dict_file.h: zero_to_fp32.py's safetensors or pytorch_model.bin):
// masters only, step 0, no optimizer state, as a checkpoint saved before the first step.
//
// Memory: one parameter's values at a time. Every write goes to a temporary name first; the
// tag is complete once metadata.ztm is renamed into place, and <out_dir>/latest then names it.
// Not collective: one process writes (e.g. the zt-from-deepspeed tool, or rank 0 then a
// barrier).

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace zt {

struct DeepSpeedImportOptions {
  // The tag written under out_dir; empty: DeepSpeed's "global_step<step>".
  std::string tag;
  // DeepSpeed (PyTorch module) parameter name -> the zerotorch model's name; empty: the same
  // name. Returning "" drops the parameter.
  std::function<std::string(const std::string&)> rename;
  // The run's gradient_accumulation_steps, so the resumed engine's micro-step counter sits on
  // an accumulation boundary.
  int64_t gradient_accumulation_steps = 1;
  // A ZeRO stage-3 run's universal checkpoint has no step.pt and stores values flat (shapes are
  // only in its model-states files, which LibTorch cannot read): `step` (DeepSpeed's
  // global_steps) and each parameter's shape by DeepSpeed name (e.g. zero_to_fp32's weights')
  // stand in. A stage 0-2 run's needs neither; a shape given must match.
  int64_t step = -1;
  std::map<std::string, std::vector<int64_t>> shapes;
};

// Returns the tag written. Throws one zt::Error naming the file for a missing or unreadable
// .pt, moments shaped unlike the master, steps that differ between parameters, or two
// parameters renamed to one name.
std::string import_deepspeed_universal(const std::string& universal_dir, const std::string& out_dir,
                                       const DeepSpeedImportOptions& options = {});
std::string import_deepspeed_weights(const std::string& weights_path, const std::string& out_dir,
                                     const DeepSpeedImportOptions& options = {});

}  // namespace zt
