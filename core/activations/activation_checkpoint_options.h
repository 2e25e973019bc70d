#pragma once
// How zt::checkpoint_activations behaves in this process (DeepSpeed's activation_checkpointing
// block), apart from the mechanism (core/activations/activation_checkpoint.h) so that the engine's
// options include no more.

#include <cstdint>
#include <optional>

namespace zt {

struct ActivationCheckpointOptions {
  std::optional<int64_t> number_checkpoints;  // unset: every call is checkpointed
  bool cpu_checkpointing = false;             // saved inputs in host memory (a CUDA model)
};

}  // namespace zt
