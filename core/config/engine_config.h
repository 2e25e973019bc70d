#pragma once
// From a resolved zt::Config (DeepSpeed-style file) to what the engine and the communicator
// take: one place that says which config key drives which engine behaviour.

#include <memory>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/engine_options.h"
#include "parallel/dist.h"

namespace zt {

// zero_optimization, fp16/bf16, data_types, gradient_accumulation_steps, gradient_clipping,
// optimizer (+ parameter_groups: no_decay, layer_lr_decay) and scheduler,
// communication_data_type, prescale_gradients / gradient_predivide_factor,
// wall_clock_breakdown and steps_per_print. `freeze` is applied to the model by zt::initialize
// (train/freeze.h) before the engine is built. `units` are the model's stage-3 units.
// Keys the engine does not act on (overlap_comm: always on; contiguous_gradients: always;
// sub_group_size, stage3_max_live_parameters) are warned about by
// check_config; offload_param is an error there and here. offload_optimizer.device nvme fills
// EngineOptions::nvme_optimizer (with sub_group_size, pipeline_read/write and the aio block).
// Throws while
// Config::pending_autos is not empty.
EngineOptions engine_options_from_config(const Config& config, std::vector<std::string> units = {});

// communication.backend / timeout.
dist::CommOptions comm_options_from_config(const Config& config);

// seq_parallel_communication_data_type, fp32 when not given (DeepSpeed's default): the dtype of
// the sequence exchange's all-to-alls and, under sequence parallelism, of gradient reductions.
at::ScalarType sequence_parallel_dtype(const Config& config);

}  // namespace zt
