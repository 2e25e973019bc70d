#pragma once
// The memory plan of a GPT run (core/plan/memory_plan.h): the units from the shape
// (models/gpt/gpt_memory.h), the activations of one block and of the root probed on the device
// (train/activation_probe.h) at the largest micro-batch the config makes: data.max_tokens /
// max_length sequences with a token budget, else train_micro_batch_size_per_gpu, of max_length
// tokens (capped by the model's max_seq_len), in the compute dtype. Probes are kept per
// (checkpointing, dtype, batch shape), so planning a config again with one change costs no new
// probe unless the change needs one. train_gpt and zt-plan share it.

#include <map>
#include <string>
#include <tuple>
#include <utility>

#include <c10/core/Device.h>

#include "core/config/config.h"
#include "core/plan/memory_plan.h"
#include "models/gpt/gpt_block.h"

namespace zt::examples {

class GptPlanner {
 public:
  GptPlanner(models::GptShape shape, c10::Device device)
      : shape_(std::move(shape)), device_(device) {}
  // checkpointing: plan with activation checkpointing whatever the shape says.
  plan::MemoryPlan operator()(const Config& config, int world_size, const std::string& backend,
                              bool checkpointing);
  bool checkpointing() const { return shape_.activation_checkpointing; }

 private:
  using Key = std::tuple<bool, int, int64_t, int64_t>;
  models::GptShape shape_;
  c10::Device device_;
  std::map<Key, std::pair<plan::UnitActivations, plan::UnitActivations>> probes_;
};

}  // namespace zt::examples
