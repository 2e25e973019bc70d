#include "core/engine_options.h"

#include "base/env_vars.h"
#include "base/error.h"

namespace zt {

void check_engine_options(const EngineOptions& o) {
  ZT_CHECK(o.stage >= 0 && o.stage <= 3, "zero_optimization.stage must be 0..3, got ", o.stage);
  ZT_CHECK(o.gradient_accumulation_steps >= 1, "gradient_accumulation_steps must be >= 1, got ",
           o.gradient_accumulation_steps);
  ZT_CHECK(o.gradient_clipping >= 0, "gradient_clipping must be >= 0, got ", o.gradient_clipping);
  ZT_CHECK(o.gradient_predivide_factor > 0, "gradient_predivide_factor must be > 0, got ",
           o.gradient_predivide_factor);
  auto is_float_type = [](at::ScalarType t) {
    return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
  };
  ZT_CHECK(is_float_type(o.grad_accum_dtype),
           "data_types.grad_accum_dtype must be fp32, fp16 or bf16, got ", o.grad_accum_dtype);
  ZT_CHECK(!o.communication_dtype || is_float_type(*o.communication_dtype),
           "communication_data_type must be fp32, fp16 or bf16, got ", *o.communication_dtype);
  ZT_CHECK(is_float_type(o.compute_dtype), "engine compute dtype must be fp32, fp16 or bf16, got ",
           o.compute_dtype);
  auto fp32_or_bf16 = [](at::ScalarType t) { return t == at::kFloat || t == at::kBFloat16; };
  ZT_CHECK(fp32_or_bf16(o.master_dtype) && fp32_or_bf16(o.optimizer_state_dtype),
           "the master and optimizer state dtypes must be fp32 or bf16, got ", o.master_dtype,
           " and ", o.optimizer_state_dtype);
  ZT_CHECK(o.master_dtype == at::kFloat || o.stage >= 1,
           "bf16.bf16_master_weights_and_grads needs zero_optimization.stage 1, 2 or 3");
  ZT_CHECK(o.optimizer_state_dtype == at::kFloat || o.master_dtype == at::kBFloat16,
           "bf16.bf16_optimizer_states needs bf16.bf16_master_weights_and_grads");
  // The 16-bit step widens the master and Adam's moments a piece at a time, which only an
  // elementwise update with exactly those two moments allows.
  const bool adam = o.optimizer.type == optim::OptimizerKind::kAdam ||
                    o.optimizer.type == optim::OptimizerKind::kAdamW ||
                    o.optimizer.type == optim::OptimizerKind::kCpuAdam ||
                    o.optimizer.type == optim::OptimizerKind::kFusedAdam;
  ZT_CHECK(o.master_dtype == at::kFloat || (adam && !o.optimizer.swa.enabled),
           "bf16.bf16_master_weights_and_grads steps with Adam or AdamW (as DeepSpeed's "
           "DeepSpeedCPUAdam / FusedAdam), not ",
           optim::optimizer_name(o.optimizer.type), o.optimizer.swa.enabled ? " with swa" : "");
  ZT_CHECK(o.offload_param.device == OffloadDevice::kNone || o.stage == 3,
           "zero_optimization.offload_param needs ZeRO stage 3; zero_optimization.stage is ",
           o.stage);
  ZT_CHECK(o.sequence_parallel_size >= 1, "sequence_parallel_size must be >= 1, got ",
           o.sequence_parallel_size);
  ZT_CHECK(o.tensor_parallel_size >= 1, "tensor_parallel.autotp_size must be >= 1, got ",
           o.tensor_parallel_size);
  // A model that split nothing would train each tensor index as a copy of the others: the program
  // did not split its layers (train_llama does; initialize refuses the others first).
  ZT_CHECK(o.tensor_parallel_size == 1 || !o.tensor_split_params.empty(),
           "tensor_parallel.autotp_size ", o.tensor_parallel_size,
           ": the model names no split parameters (EngineOptions::tensor_split_params), so its "
           "layers are not split; this program does not support tensor parallelism");
  ZT_CHECK(o.expert_parallel_size >= 1, "expert_parallel.autoep_size must be >= 1, got ",
           o.expert_parallel_size);
  ZT_CHECK(o.expert_parallel_size == 1 || o.tensor_parallel_size == 1,
           "expert_parallel.autoep_size ", o.expert_parallel_size,
           " with tensor_parallel.autotp_size ", o.tensor_parallel_size,
           ": experts are not split over a tensor group; set one of them to 1");
  // The same for experts: a model that did not deal its experts over the expert group would
  // train each expert index as a copy.
  ZT_CHECK(o.expert_parallel_size == 1 || !o.tensor_split_params.empty() || !o.dealt_params.empty(),
           "expert_parallel.autoep_size ", o.expert_parallel_size,
           ": the model names no split or dealt parameters (EngineOptions::tensor_split_params, "
           "dealt_params), so its experts are not dealt over the expert group; this program does "
           "not support expert parallelism");
  ZT_CHECK(o.tensor_parallel_size == 1 || o.optimizer.type != optim::OptimizerKind::kMuon,
           "optimizer Muon with tensor parallelism: it orthogonalises whole matrices, which "
           "tensor parallelism splits");
  ZT_CHECK(o.expert_parallel_size == 1 || o.optimizer.type != optim::OptimizerKind::kMuon,
           "optimizer Muon with expert_parallel.autoep_size ", o.expert_parallel_size,
           ": it orthogonalises whole parameters, and a fused experts parameter is dealt over "
           "the expert group");
}

void read_environment_switches(EngineOptions& o) {
  // Every rank reads the same values: ztrun, mpirun and srun pass the environment on.
  o.host_cache = env::choice(env::kHostCache, "1", {"0", "1"}) == "1";
  const std::string two_level = env::choice(env::kHierarchicalReduce, "auto", {"auto", "0", "1"});
  o.hierarchical_reduce = two_level == "auto" ? EngineOptions::TwoLevelReduce::kAuto
                          : two_level == "1"  ? EngineOptions::TwoLevelReduce::kOn
                                              : EngineOptions::TwoLevelReduce::kOff;
}

dist::TopologyOptions topology_options(const ZeroConfig& z,
                                       EngineOptions::TwoLevelReduce hierarchical_reduce,
                                       int sequence_parallel_size, int tensor_parallel_size,
                                       int expert_parallel_size) {
  // Below stage 3 the stage-3 keys do nothing, as in DeepSpeed; the config says so once
  // (validate.cpp).
  const bool stage3 = z.stage == 3;
  dist::TopologyOptions t;
  t.shard_size = stage3 && z.mics_shard_size > 0 ? z.mics_shard_size : 0;
  t.hpz = stage3 ? z.zero_hpz_partition_size : 1;
  t.quantized_reduce = stage3 && z.zero_quantized_gradients;
  t.hierarchical_reduce =
      z.stage <= 2 ? hierarchical_reduce : dist::TopologyOptions::TwoLevel::kOff;
  t.hierarchical_gather = stage3 && z.mics_shard_size > 0 && z.mics_hierarchical_params_gather;
  t.quantized_weights = z.zero_quantized_weights;
  t.sequence_parallel_size = sequence_parallel_size;
  t.tensor_parallel_size = tensor_parallel_size;
  t.expert_parallel_size = expert_parallel_size;
  return t;
}

}  // namespace zt
