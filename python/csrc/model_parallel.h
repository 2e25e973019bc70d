#pragma once
// What a Python model is split with (python/csrc/model_parallel_bindings.cpp): the launch's
// topology (sequence, tensor and expert groups) and, from the config, the exchange's wire dtype and
// the tensor_parallel block's split source (preset_model, partition_config as JSON text).

#include <memory>
#include <string>

#include <ATen/ATen.h>

#include "parallel/topology.h"

namespace zt::python {

struct ModelParallelGroups {
  std::shared_ptr<const dist::Topology> topology;
  std::shared_ptr<dist::Communicator> sequence;  // null without sequence parallelism
  std::shared_ptr<dist::Communicator> tensor;    // null without tensor parallelism
  std::shared_ptr<dist::Communicator> expert;    // null without expert parallelism
  at::ScalarType wire = at::kFloat;              // seq_parallel_communication_data_type
  std::string preset_model;
  std::string partition_config;  // "" when the config has none
};

}  // namespace zt::python
