#pragma once
// A layer's forward with activation checkpointing as every model here uses it, written once: when
// the layer's own switch is on and it trains with grad, fn runs under zt::checkpoint_activations
// (core/activations/activation_checkpoint.h), which keeps only `inputs` and runs fn again in the
// layer's backward (gathered by then at stage 3: call_unit's hook on the layer's output);
// otherwise fn runs as it is.

#include <vector>

#include <ATen/core/grad_mode.h>
#include <torch/nn/module.h>

#include "core/activations/activation_checkpoint.h"

namespace zt::models {

inline at::Tensor checkpointed_forward(bool checkpoint, const torch::nn::Module& layer,
                                       const CheckpointFn& fn,
                                       const std::vector<at::Tensor>& inputs) {
  if (checkpoint && layer.is_training() && at::GradMode::is_enabled()) {
    return checkpoint_activations(fn, inputs);
  }
  return fn(inputs);
}

}  // namespace zt::models
