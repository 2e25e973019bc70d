#pragma once
// The memory plan of a train_llama run (core/plan/memory_plan.h): the units and parameter sizes
// of the model a rank holds at its split (models/llama/llama_memory.h, from the shape: nothing is
// built), and the activations of one decoder layer of each kind and of the root probed on the
// device (models/llama/llama_memory.h, train/activation_probe.h) at the largest micro-batch the
// config makes, split as this rank's part: data.max_tokens / max_length sequences with a token
// budget, else train_micro_batch_size_per_gpu, of max_length tokens (capped by
// max_position_embeddings, padded to a multiple of the sequence split), in the compute dtype.
// Probes are kept per (checkpointing, dtype, batch shape). train_llama and zt-plan share it.
//
// The activations go to the unit that computes them: each decoder layer its kind's (a routed
// layer's experts, a unit inside it, run within it), the head's unit (an untied lm_head, gathered
// around the loss) the root's probe, else the root; the first layer the windows' masks (made
// before it, kept to its backward, the last).

#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <c10/core/Device.h>

#include "core/config/config.h"
#include "core/plan/memory_plan.h"
#include "models/llama/llama_memory.h"
#include "models/llama/llama_shape.h"

namespace zt::examples {

class LlamaPlanner {
 public:
  LlamaPlanner(models::LlamaShape shape, models::LlamaRankSplit split, c10::Device device);
  // checkpointing: plan with activation checkpointing whatever the shape says.
  plan::MemoryPlan operator()(const Config& config, int world_size, const std::string& backend,
                              bool checkpointing);
  bool checkpointing() const { return shape_.activation_checkpointing; }

 private:
  struct Probed {
    std::vector<std::pair<models::LlamaProbe::Kind, plan::UnitActivations>> layers;
    plan::UnitActivations root;
    int64_t mask_bytes = 0;
  };
  using Key = std::tuple<bool, int, int64_t, int64_t>;
  models::LlamaShape shape_;
  plan::ModelMemory model_;
  models::LlamaRankSplit split_;
  c10::Device device_;
  std::map<Key, Probed> probes_;
};

}  // namespace zt::examples
