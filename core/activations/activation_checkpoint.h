#pragma once
// Activation checkpointing for any model, reentrant like torch.utils.checkpoint and DeepSpeed's
// deepspeed.checkpointing.checkpoint:
//
//   x = zt::checkpoint_activations([this](const std::vector<at::Tensor>& in) {
//         return forward_impl(in[0], in[1]); }, {x, mask});
//
// Forward runs `fn` without building a graph and keeps only its inputs; backward runs `fn` again
// with grad on and back-propagates through that, so the intermediate activations of the wrapped
// call live only while its own backward runs. The CPU generator (and the inputs' CUDA device
// generator) is restored around the recompute, so dropout draws the same masks both times.
//
// Stage 3: wrap the body of a unit (a module called through zt::call_unit) and the engine gathers
// the unit's parameters again just before its backward (core/zero/call_unit.h), which is when the
// recompute needs them.
//
// The config's activation_checkpointing block sets the options (the engine installs them at
// construction, as DeepSpeed's checkpointing.configure does): number_checkpoints N checkpoints
// the first N calls of each forward pass (the engine starts a pass at every Engine::forward) and
// runs the others normally; cpu_checkpointing keeps the saved inputs in host memory between the
// forward and the recompute. Without grad (evaluation), or when no input requires grad (the
// output would carry none), `fn` simply runs.

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/activations/activation_checkpoint_options.h"

namespace zt {

// Process-wide, like DeepSpeed's module state: the last engine built sets them.
void configure_activation_checkpointing(const ActivationCheckpointOptions& options);
ActivationCheckpointOptions activation_checkpointing_options();

// Starts a forward pass: number_checkpoints counts from here.
void begin_checkpointed_forward();

// Calls made with grad on since begin_checkpointed_forward, and how many of them were
// checkpointed (for tests and the memory accounting of a program).
struct CheckpointCounts {
  int64_t calls = 0;
  int64_t checkpointed = 0;
};
CheckpointCounts checkpoint_counts();

using CheckpointFn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

// fn(inputs), keeping only `inputs` for backward (see above). Inputs may be undefined or carry
// no gradient (a mask); those that require grad get their gradient from the recompute. `fn`
// must be callable again during backward (capture modules, not stack references).
at::Tensor checkpoint_activations(const CheckpointFn& fn, const std::vector<at::Tensor>& inputs);

// Whether this thread is running a checkpointed call again, in its backward.
bool in_checkpoint_recompute();
// During that recompute: a scalar whose gradient the recomputed graph must also carry (a loss
// term computed from values inside the call, such as a mixture's load-balancing loss, whose first
// pass had no graph). It is backpropagated together with the call's output.
void add_recompute_loss(const at::Tensor& scalar);

}  // namespace zt
