#pragma once
// Measures the activation bytes of one unit for one micro-batch, on the device it will train on,
// for the memory plan (core/plan/memory_plan.h): the plan needs what a unit's forward keeps for
// backward and the transients of its forward and backward, which depend on the kernels the
// device picks (fused attention or not, the recompute of activation checkpointing) as much as on
// the shapes. The program builds one unit (and its root: embeddings, head, loss) at the batch's
// shape in the compute dtype and hands its forward here; the probe runs it once forward and once
// backward, counting the device allocator's bytes (train/memory_peaks.h; on the CPU the CPU
// tensor bytes, cpu_memory_meter.h, installed for the probe only).
//
// As in the engine, each parameter's gradient is dropped as soon as it is accumulated (the
// engine moves it into its bucket: core/zero/grad_sync.h), so the backward's transients are the
// kernels' own, one parameter gradient at a time.

#include <functional>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include "core/config/config.h"
#include "core/plan/memory_plan.h"

namespace zt::train {

// Keeps the random state of the CPU and of `device` across a probe: making and running one draws
// numbers (weights, inputs, dropout) that training must not see consumed, so a run draws the same
// weights whether or not, and on whichever device, its memory was planned.
class KeepRandomState {
 public:
  explicit KeepRandomState(const c10::Device& device);
  ~KeepRandomState();
  KeepRandomState(const KeepRandomState&) = delete;
  KeepRandomState& operator=(const KeepRandomState&) = delete;

 private:
  c10::Device device_;
  at::Tensor cpu_, other_;
};

// The micro-batch a plan probes: the largest the config makes (data.max_tokens / seq sequences
// with a token budget, else train_micro_batch_size_per_gpu) of seq = data.max_length tokens,
// capped by the model's `max_positions` and padded up to a multiple of `seq_multiple` (a
// sequence split's, data/sequence_split.h), in the compute dtype.
struct ProbeBatch {
  int64_t batch = 1, seq = 1;
  at::ScalarType dtype = at::kFloat;
};
ProbeBatch probe_batch(const Config& config, int64_t max_positions, int64_t seq_multiple = 1);

// forward: runs the unit on inputs made beforehand (not counted) and returns its output; for
// the root, the loss. The backward starts from a gradient of ones shaped like the output.
plan::UnitActivations probe_activations(torch::nn::Module& unit,
                                        const std::function<at::Tensor()>& forward,
                                        const c10::Device& device);

}  // namespace zt::train
