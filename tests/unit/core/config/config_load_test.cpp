// Configs that must load: every file of configs/, JSON vs YAML, "auto" as the Hugging Face
// integration writes it, scientific-notation integers, the batch rule, overrides, DeepSpeed's
// older and alternative key names.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include <gtest/gtest.h>

#include "base/error.h"
#include "core/config/config.h"
#include "core/config/engine_config.h"
#include "core/precision/overflow_vote.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

Config yaml(const std::string& text, int world_size = 1,
            const std::vector<std::string>& overrides = {}, const ProgramValues& p = {}) {
  return parse_config(text, ConfigFormat::kYaml, overrides, world_size, p);
}

// Values a Trainer-like program supplies for every "auto" key.
ProgramValues full_program_values() {
  ProgramValues p;
  p.micro_batch_size = 4;
  p.gradient_accumulation_steps = 2;
  p.gradient_clipping = 1.0;
  p.fp16 = false;
  p.bf16 = true;
  p.lr = 5e-5;
  p.betas = std::vector<double>{0.9, 0.98};
  p.eps = 1e-6;
  p.weight_decay = 0.01;
  p.warmup_steps = 10;
  p.total_steps = 500;
  p.hidden_size = 1024;
  return p;
}

std::vector<fs::path> shipped_configs() {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(ZT_SOURCE_DIR) / "configs")) {
    const std::string ext = e.path().extension().string();
    if (ext == ".json" || ext == ".yaml" || ext == ".yml") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(ConfigLoad, DefaultsAreDeepSpeeds) {
  Config c = yaml("train_batch_size: 8");
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 8);
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.zero_optimization.stage, 0);
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size, 500'000'000);
  EXPECT_EQ(c.zero_optimization.stage3_prefetch_bucket_size, 50'000'000);
  EXPECT_EQ(c.zero_optimization.stage3_param_persistence_threshold, 100'000);
  EXPECT_EQ(c.zero_optimization.offload_optimizer.buffer_count, 4);
  EXPECT_EQ(c.zero_optimization.offload_param.buffer_count, 5);
  EXPECT_FALSE(c.zero_optimization.overlap_comm);
  EXPECT_EQ(c.fp16.initial_scale_power, 16);
  EXPECT_EQ(c.fp16.loss_scale_window, 1000);
  EXPECT_EQ(c.fp16.hysteresis, 2);
  EXPECT_EQ(c.fp16.min_loss_scale, 1.0);
  EXPECT_EQ(c.steps_per_print, 10);
  EXPECT_FALSE(c.optimizer.has_value());
  EXPECT_TRUE(c.program_blocks.empty());
  // DeepSpeed 0.19 (runtime/constants.py, runtime/zero/offload_config.py): clipping at 1.0 unless
  // the config says otherwise (0 turns it off), offload buffers pinned.
  EXPECT_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(engine_options_from_config(c).gradient_clipping, 1.0);
  EXPECT_EQ(yaml("train_batch_size: 8\ngradient_clipping: 0\n").gradient_clipping, 0.0);
  EXPECT_TRUE(c.zero_optimization.offload_optimizer.pin_memory);
  EXPECT_TRUE(c.zero_optimization.offload_param.pin_memory);
}

// DeepSpeed's WarmupLR without warmup_max_lr warms up to the optimizer's lr
// (runtime/lr_schedules.py: warmup_max_lr None takes each group's lr); WarmupDecayLR's own default
// stays 0.001, and a written warmup_max_lr is kept.
TEST(ConfigLoad, WarmupLrPeaksAtTheOptimizersLrUnlessWritten) {
  const std::string opt = "train_batch_size: 8\noptimizer: {type: AdamW, params: {lr: 3.0e-4}}\n";
  EXPECT_EQ(yaml(opt + "scheduler: {type: WarmupLR}\n").scheduler->warmup_max_lr, 3e-4);
  EXPECT_EQ(yaml(opt + "scheduler: {type: WarmupLR, params: {warmup_max_lr: 1.0e-2}}\n")
                .scheduler->warmup_max_lr,
            1e-2);
  EXPECT_EQ(yaml(opt + "scheduler: {type: WarmupDecayLR, params: {total_num_steps: 2000}}\n")
                .scheduler->warmup_max_lr,
            1e-3);
  EXPECT_EQ(yaml("train_batch_size: 8\nscheduler: {type: WarmupLR}\n").scheduler->warmup_max_lr,
            1e-3);
}

TEST(ConfigLoad, OverlapCommDefaultsOnAtStage3Only) {
  EXPECT_TRUE(
      yaml("train_batch_size: 8\nzero_optimization: {stage: 3}").zero_optimization.overlap_comm);
  EXPECT_FALSE(yaml("train_batch_size: 8\nzero_optimization: {stage: 3, overlap_comm: false}")
                   .zero_optimization.overlap_comm);
}

TEST(ConfigLoad, EveryShippedConfigRoundTrips) {
  const auto files = shipped_configs();
  ASSERT_GE(files.size(), 9u);
  for (int world_size : {1, 4}) {
    for (const auto& f : files) {
      SCOPED_TRACE(f.string());
      Config a = load_config(f.string(), {}, world_size, full_program_values());
      Config b = parse_config(a.to_json(), ConfigFormat::kJson, {}, world_size);
      EXPECT_EQ(a, b);
      EXPECT_EQ(a.to_json(), b.to_json());
      EXPECT_EQ(a.train_batch_size,
                a.train_micro_batch_size_per_gpu * a.gradient_accumulation_steps * world_size);
    }
  }
}

TEST(ConfigLoad, SavedConfigReloadsAtAnotherWorldSize) {
  Config saved = yaml("train_micro_batch_size_per_gpu: 4\ngradient_accumulation_steps: 2", 2);
  const std::string json = saved.to_json();
  EXPECT_FALSE(check_config(json, ConfigFormat::kJson, {}, 4).config);  // 16 != 4 * 2 * 4
  Config moved = parse_config(json, ConfigFormat::kJson, {"train_batch_size=auto"}, 4);
  EXPECT_EQ(moved.train_batch_size, 32);
  EXPECT_EQ(moved.train_micro_batch_size_per_gpu, 4);
}

TEST(ConfigLoad, JsonAndYamlGiveEqualConfigs) {
  const std::string dir = std::string(ZT_SOURCE_DIR) + "/configs/";
  Config j = load_config(dir + "zero3.json", {}, 2);
  Config y = load_config(dir + "zero3.yaml", {}, 2);
  EXPECT_EQ(j, y);
  EXPECT_EQ(j.zero_optimization.stage, 3);
  EXPECT_TRUE(j.zero_optimization.stage3_gather_16bit_weights_on_model_save);
  // The same config changed in one key is not equal: equality looks at values.
  Config z = load_config(dir + "zero3.yaml", {"zero_optimization.sub_group_size=1e8"}, 2);
  EXPECT_NE(j, z);
}

TEST(ConfigLoad, HuggingFaceAutoConfigResolvesFromProgram) {
  const std::string path = std::string(ZT_SOURCE_DIR) + "/configs/hf_auto_zero3.json";
  Config c = load_config(path, {}, 2, full_program_values());
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(c.gradient_accumulation_steps, 2);
  EXPECT_EQ(c.train_batch_size, 16);
  EXPECT_EQ(c.gradient_clipping, 1.0);
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_TRUE(c.bf16.enabled);
  ASSERT_TRUE(c.optimizer && c.scheduler);
  EXPECT_DOUBLE_EQ(c.optimizer->lr, 5e-5);
  EXPECT_EQ(c.optimizer->betas, (std::vector<double>{0.9, 0.98}));
  EXPECT_DOUBLE_EQ(c.optimizer->eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.optimizer->weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(c.scheduler->warmup_min_lr, 0.0);
  EXPECT_DOUBLE_EQ(c.scheduler->warmup_max_lr, 5e-5);
  EXPECT_EQ(c.scheduler->warmup_num_steps, 10);
  EXPECT_EQ(c.scheduler->total_num_steps, 500);
  // Hidden size 1024, as the HF integration computes them.
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size, 1024 * 1024);
  EXPECT_EQ(c.zero_optimization.stage3_prefetch_bucket_size, 943718);  // 0.9 * 1024^2
  EXPECT_EQ(c.zero_optimization.stage3_param_persistence_threshold, 10240);
  EXPECT_EQ(c.zero_optimization.sub_group_size, 1'000'000'000);  // written 1e9
  EXPECT_EQ(c.zero_optimization.offload_optimizer.device, OffloadDevice::kCpu);
}

TEST(ConfigLoad, AxolotlStyleZero3WithZerosAndAutoLimits) {
  // As found in public fine-tuning repos: sub_group_size 0, "auto" limits and save flag.
  Config c = parse_config(R"({
  "zero_optimization": {"stage": 3, "sub_group_size": 0, "reduce_bucket_size": "auto",
    "stage3_max_live_parameters": "auto", "stage3_max_reuse_distance": "auto",
    "stage3_gather_16bit_weights_on_model_save": "auto"},
  "fp16": {"enabled": "auto", "initial_scale_power": 32},
  "bf16": {"enabled": true},
  "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
  "gradient_accumulation_steps": "auto"
})",
                          ConfigFormat::kJson, {}, 8, full_program_values());
  EXPECT_EQ(c.zero_optimization.sub_group_size, 0);
  EXPECT_EQ(c.zero_optimization.stage3_max_live_parameters, 1'000'000'000);
  EXPECT_FALSE(c.zero_optimization.stage3_gather_16bit_weights_on_model_save);
  EXPECT_EQ(c.fp16.initial_scale_power, 32);
  EXPECT_EQ(c.train_batch_size, 4 * 2 * 8);
}

TEST(ConfigLoad, ProgramBlocksAreHandedOverUnread) {
  // The GPT example's `model` block: the framework knows none of its keys (vocab_size 0 means
  // "from the data" to that program only), keeps it, writes it back and hands it over.
  Config c = yaml("train_batch_size: 8\nmodel: {vocab_size: 0, name: \"x\", sizes: [1, 2.5]}", 1,
                  {"model.n_layer=3", "task.type=mlp"});
  ASSERT_EQ(c.program_blocks.size(), 2u);
  const ProgramBlock m = c.program_block("model");
  EXPECT_EQ(m.keys(), (std::vector<std::string>{"vocab_size", "name", "sizes", "n_layer"}));
  EXPECT_EQ(m.to_json(), R"({"vocab_size":0,"name":"x","sizes":[1,2.5],"n_layer":3})");
  EXPECT_TRUE(c.program_block("task").has("type"));
  EXPECT_TRUE(c.program_block("absent").empty());
  Config again = parse_config(c.to_json(), ConfigFormat::kJson, {}, 1);
  EXPECT_EQ(again, c);
  EXPECT_EQ(again.program_block("model").to_json(), m.to_json());
  EXPECT_NE(c, yaml("train_batch_size: 8\nmodel: {vocab_size: 1, name: \"x\", sizes: [1, 2.5]}", 1,
                    {"model.n_layer=3", "task.type=mlp"}));
}

TEST(ConfigLoad, AutoResolvesFromOtherFields) {
  // Bucket sizes from the program's hidden size, read where the program says it is
  // (model.d_model); the optimizer's lr from the scheduler's peak; the batch size from the
  // other two.
  ProgramValues hidden_in_model;
  hidden_in_model.hidden_size_key = "model.d_model";
  Config c = yaml(R"(
train_batch_size: auto
train_micro_batch_size_per_gpu: 2
gradient_accumulation_steps: 3
optimizer: {type: Adam, params: {lr: auto}}
scheduler: {type: WarmupLR, params: {warmup_max_lr: 0.002}}
zero_optimization: {stage: 3, reduce_bucket_size: auto}
model: {d_model: 64, n_head: 4}
)",
                  2, {}, hidden_in_model);
  EXPECT_EQ(c.train_batch_size, 12);
  EXPECT_DOUBLE_EQ(c.optimizer->lr, 0.002);
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size, 64 * 64);
  // And the scheduler's peak from the optimizer.
  Config d = yaml(R"(
train_batch_size: 4
optimizer: {type: AdamW, params: {lr: 0.01}}
scheduler: {type: WarmupDecayLR, params: {warmup_max_lr: auto, total_num_steps: 10,
            warmup_num_steps: 2}}
)");
  EXPECT_DOUBLE_EQ(d.scheduler->warmup_max_lr, 0.01);
}

TEST(ConfigLoad, ScientificNotationFillsIntegers) {
  Config c = yaml(R"(
train_batch_size: 8
zero_optimization: {reduce_bucket_size: 2e8, allgather_bucket_size: 2.5e8,
                    stage3_max_live_parameters: 1e14, sub_group_size: 123456789012}
)");
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size, 200'000'000);
  EXPECT_EQ(c.zero_optimization.allgather_bucket_size, 250'000'000);
  EXPECT_EQ(c.zero_optimization.stage3_max_live_parameters, 100'000'000'000'000);
  EXPECT_EQ(c.zero_optimization.sub_group_size, 123456789012);
}

TEST(ConfigLoad, BatchTripleAnyTwoDetermineTheThird) {
  Config a = yaml("train_batch_size: 32\ntrain_micro_batch_size_per_gpu: 4", 2);
  EXPECT_EQ(a.gradient_accumulation_steps, 4);
  Config b = yaml("train_batch_size: 32\ngradient_accumulation_steps: 2", 2);
  EXPECT_EQ(b.train_micro_batch_size_per_gpu, 8);
  Config c = yaml("train_micro_batch_size_per_gpu: 3\ngradient_accumulation_steps: 5", 4);
  EXPECT_EQ(c.train_batch_size, 60);
  Config d = yaml("train_batch_size: 12", 3);
  EXPECT_EQ(d.train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(d.gradient_accumulation_steps, 1);
  Config e = yaml(
      "train_batch_size: 24\ntrain_micro_batch_size_per_gpu: 3\ngradient_accumulation_steps: 2", 4);
  EXPECT_EQ(e.world_size, 4);
}

TEST(ConfigLoad, OverridesApplyInOrderBeforeValidation) {
  Config c = yaml("train_batch_size: 8\nzero_optimization: {stage: 9}", 1,
                  {"zero_optimization.stage=1", "zero_optimization.stage=3", "optimizer.type=SGD",
                   "optimizer.params.momentum=0.9", "data.path=/tmp/tokens",
                   "freeze=[embed.*, head.*]", "bf16.enabled=true"});
  EXPECT_EQ(c.zero_optimization.stage, 3);
  ASSERT_TRUE(c.optimizer);
  EXPECT_EQ(c.optimizer->type, OptimizerType::kSgd);
  EXPECT_DOUBLE_EQ(c.optimizer->momentum, 0.9);
  EXPECT_EQ(c.data.path, "/tmp/tokens");
  EXPECT_EQ(c.freeze, (std::vector<std::string>{"embed.*", "head.*"}));
  EXPECT_TRUE(c.bf16.enabled);
}

TEST(ConfigLoad, OlderAndAlternativeNames) {
  Config c = yaml(R"(
train_batch_size: 8
zero_optimization: {stage: 3, stage3_gather_fp16_weights_on_model_save: true,
                    prefetch_bucket_size: 1e6}
bfloat16: {enabled: true}
comms: {backend: gloo, timeout: 60}
optimizer: {type: adamw}
)");
  EXPECT_TRUE(c.zero_optimization.stage3_gather_16bit_weights_on_model_save);
  EXPECT_EQ(c.zero_optimization.stage3_prefetch_bucket_size, 1'000'000);
  EXPECT_TRUE(c.bf16.enabled);
  EXPECT_EQ(c.communication.backend, CommBackend::kGloo);
  EXPECT_EQ(c.communication.timeout, 60);
  EXPECT_EQ(c.optimizer->type, OptimizerType::kAdamW);  // type names ignore case
}

// The in-flight bound on gradient reductions is a config key of our communication block; left
// out, config and engine share one default.
TEST(ConfigLoad, MaxInflightReductionsReachesTheEngine) {
  Config c = yaml("train_batch_size: 8\ncommunication: {max_inflight_reductions: 2}\n");
  EXPECT_EQ(c.communication.max_inflight_reductions, 2);
  EXPECT_EQ(engine_options_from_config(c).max_inflight_reductions, 2);
  Config d = yaml("train_batch_size: 8\n");
  EXPECT_EQ(engine_options_from_config(d).max_inflight_reductions,
            EngineOptions{}.max_inflight_reductions);
  EXPECT_EQ(EngineOptions{}.max_inflight_reductions, defaults::kMaxInflightReductions);
}

// DeepSpeed's bf16 master keys (runtime/precision_config.py): bf16 masters with their gradient
// shard in bf16, and Adam's moments in bf16 only when bf16_optimizer_states says so; an explicit
// data_types.grad_accum_dtype keeps its say over the gradients.
TEST(ConfigLoad, Bf16MasterKeysReachTheEngine) {
  const std::string base =
      "train_batch_size: 8\nzero_optimization: {stage: 3}\nbf16: {enabled: true, "
      "bf16_master_weights_and_grads: true";
  const EngineOptions m = engine_options_from_config(yaml(base + "}\n"));
  EXPECT_EQ(m.master_dtype, at::kBFloat16);
  EXPECT_EQ(m.grad_accum_dtype, at::kBFloat16);
  EXPECT_EQ(m.optimizer_state_dtype, at::kFloat);
  const EngineOptions ms =
      engine_options_from_config(yaml(base + ", bf16_optimizer_states: true}\n"));
  EXPECT_EQ(ms.optimizer_state_dtype, at::kBFloat16);
  const EngineOptions fp32_grads =
      engine_options_from_config(yaml(base + "}\ndata_types: {grad_accum_dtype: fp32}\n"));
  EXPECT_EQ(fp32_grads.master_dtype, at::kBFloat16);
  EXPECT_EQ(fp32_grads.grad_accum_dtype, at::kFloat);
  const EngineOptions plain =
      engine_options_from_config(yaml("train_batch_size: 8\nbf16: {enabled: true}\n"));
  EXPECT_EQ(plain.master_dtype, at::kFloat);
  EXPECT_EQ(plain.grad_accum_dtype, at::kFloat);
}

// bf16.check_grad_overflow (DeepSpeed's default true) reaches the engine, which decides with the
// stage and dtype whether a step with inf/NaN gradients is skipped (core/precision/overflow_vote.h,
// DeepSpeed 0.19's rule as run).
TEST(ConfigLoad, Bf16CheckGradOverflowReachesTheEngine) {
  const EngineOptions on = engine_options_from_config(
      yaml("train_batch_size: 8\nzero_optimization: {stage: 2}\nbf16: {enabled: true}\n"));
  EXPECT_TRUE(on.bf16_check_grad_overflow);
  EXPECT_TRUE(skips_nonfinite_steps(on));
  EngineOptions off =
      engine_options_from_config(yaml("train_batch_size: 8\nzero_optimization: {stage: 2}\n"
                                      "bf16: {enabled: true, check_grad_overflow: false}\n"));
  EXPECT_FALSE(off.bf16_check_grad_overflow);
  EXPECT_FALSE(skips_nonfinite_steps(off));
  for (int stage : {0, 3}) {  // DeepSpeed skips there whatever the key says
    off.stage = stage;
    EXPECT_TRUE(skips_nonfinite_steps(off)) << "bf16 stage " << stage;
  }
  EngineOptions fp32;
  for (int stage : {0, 1, 2, 3}) {
    fp32.stage = stage;
    EXPECT_EQ(skips_nonfinite_steps(fp32), stage >= 1) << "fp32 stage " << stage;
  }
}

// The environment's behaviour switches (base/env_vars.h) reach the engine as options, read where
// the options are built; a bad value is a one-line error naming the variable.
TEST(ConfigLoad, EnvironmentSwitchesBecomeEngineOptions) {
  using R = EngineOptions::TwoLevelReduce;
  const Config c = yaml("train_batch_size: 8\n");
  auto with = [&](const char* name, const char* value) {
    ::setenv(name, value, 1);
    struct Unset {
      const char* n;
      ~Unset() { ::unsetenv(n); }
    } unset{name};
    return engine_options_from_config(c);
  };
  ::unsetenv("ZT_HOST_CACHE");
  ::unsetenv("ZT_HIERARCHICAL_REDUCE");
  const EngineOptions unset = engine_options_from_config(c);
  EXPECT_TRUE(unset.host_cache);
  EXPECT_EQ(unset.hierarchical_reduce, R::kAuto);
  EXPECT_FALSE(with("ZT_HOST_CACHE", "0").host_cache);
  EXPECT_TRUE(with("ZT_HOST_CACHE", "").host_cache);
  EXPECT_EQ(with("ZT_HIERARCHICAL_REDUCE", "0").hierarchical_reduce, R::kOff);
  EXPECT_EQ(with("ZT_HIERARCHICAL_REDUCE", "1").hierarchical_reduce, R::kOn);
  EXPECT_EQ(with("ZT_HIERARCHICAL_REDUCE", "auto").hierarchical_reduce, R::kAuto);
  for (const auto& [name, message] :
       {std::pair{"ZT_HOST_CACHE", "ZT_HOST_CACHE must be 0 or 1, got 'yes'"},
        std::pair{"ZT_HIERARCHICAL_REDUCE",
                  "ZT_HIERARCHICAL_REDUCE must be auto, 0 or 1, got 'yes'"}}) {
    try {
      with(name, "yes");
      ADD_FAILURE() << name << "=yes was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

// The keys that ask for process groups act only at the stages that use them (DeepSpeed reads the
// MiCS, hpZ and qgZ keys at stage 3 only; the hierarchical reduction is for stages 0-2), so the
// topology a config asks for follows its stage.
TEST(ConfigLoad, TopologyOptionsFollowTheStage) {
  using T = dist::TopologyOptions::TwoLevel;
  for (int stage : {0, 1, 2, 3}) {
    const Config c =
        yaml("train_batch_size: 8\nzero_optimization:\n  stage: " + std::to_string(stage) +
                 "\n  mics_shard_size: 2\n  mics_hierarchical_params_gather: true\n"
                 "  zero_hpz_partition_size: 2\n  zero_quantized_gradients: true\n",
             /*world_size=*/4);
    const dist::TopologyOptions t = topology_options(c.zero_optimization, T::kOn, 1);
    const bool s3 = stage == 3;
    EXPECT_EQ(t.shard_size, s3 ? 2 : 0) << "stage " << stage;
    EXPECT_EQ(t.hpz, s3 ? 2 : 1) << "stage " << stage;
    EXPECT_EQ(t.quantized_reduce, s3) << "stage " << stage;
    EXPECT_EQ(t.hierarchical_gather, s3) << "stage " << stage;
    EXPECT_EQ(t.hierarchical_reduce, s3 ? T::kOff : T::kOn) << "stage " << stage;
  }
  // Without hybrid sharding the hierarchical gather has no shard group to cut into nodes.
  const Config plain = yaml(
      "train_batch_size: 8\nzero_optimization:\n  stage: 3\n"
      "  mics_hierarchical_params_gather: true\n",
      /*world_size=*/4);
  const dist::TopologyOptions t = topology_options(plain.zero_optimization, T::kAuto, 1);
  EXPECT_EQ(t.shard_size, 0);
  EXPECT_FALSE(t.hierarchical_gather);
}

// The engine takes the zero_optimization block the config reads, so a program that fills
// EngineOptions itself starts from DeepSpeed's defaults too, and the config's values arrive whole.
TEST(ConfigLoad, EngineTakesTheZeroBlockAsRead) {
  const EngineOptions plain;
  EXPECT_EQ(plain.stage3_param_persistence_threshold, 100'000);
  EXPECT_EQ(plain.reduce_bucket_size, 500'000'000);
  EXPECT_EQ(plain.stage3_prefetch_bucket_size, 50'000'000);
  EXPECT_EQ(plain.sub_group_size, 1'000'000'000);
  EXPECT_EQ(plain.offload_optimizer.buffer_count, 4);
  EXPECT_EQ(plain.offload_param.buffer_count, 5);
  Config c = yaml(
      "train_batch_size: 8\n"
      "zero_optimization: {stage: 3, reduce_bucket_size: 1234, stage3_prefetch_bucket_size: 77,\n"
      "  stage3_param_persistence_threshold: 9, sub_group_size: 321,\n"
      "  offload_param: {device: cpu, pin_memory: true, max_in_cpu: 5}}\n");
  const EngineOptions o = engine_options_from_config(c);
  EXPECT_EQ(o.stage, 3);
  EXPECT_EQ(o.reduce_bucket_size, 1234);
  EXPECT_EQ(o.stage3_prefetch_bucket_size, 77);
  EXPECT_EQ(o.stage3_param_persistence_threshold, 9);
  EXPECT_EQ(o.sub_group_size, 321);
  EXPECT_EQ(o.offload_param.device, OffloadDevice::kCpu);
  EXPECT_TRUE(o.offload_param.pin_memory);
  EXPECT_EQ(o.offload_param.max_in_cpu, 5);
  EXPECT_FALSE(o.optimizer_offloaded());
}

// The activation_checkpointing block configures zt::checkpoint_activations through the engine;
// the keys that need a model-parallel group say once that they have no effect.
TEST(ConfigLoad, ActivationCheckpointingReachesTheEngine) {
  Config c = yaml(
      "train_batch_size: 8\n"
      "activation_checkpointing: {number_checkpoints: 3, cpu_checkpointing: true}\n");
  const EngineOptions o = engine_options_from_config(c);
  ASSERT_TRUE(o.activation_checkpointing.number_checkpoints);
  EXPECT_EQ(*o.activation_checkpointing.number_checkpoints, 3);
  EXPECT_TRUE(o.activation_checkpointing.cpu_checkpointing);
  EXPECT_FALSE(engine_options_from_config(yaml("train_batch_size: 8\n"))
                   .activation_checkpointing.number_checkpoints);
  const ConfigReport r = check_config(
      R"({"train_batch_size": 8, "activation_checkpointing": {"number_checkpoints": 3,
          "cpu_checkpointing": true, "partition_activations": true}})",
      ConfigFormat::kJson, {}, 1);
  ASSERT_TRUE(r.config);
  EXPECT_TRUE(std::any_of(r.warnings.begin(), r.warnings.end(), [](const std::string& w) {
    return w.rfind("activation_checkpointing.partition_activations", 0) == 0 &&
           w.find("model-parallel") != std::string::npos;
  }));
  for (const auto& w : r.warnings) {
    EXPECT_EQ(w.find("number_checkpoints"), std::string::npos) << w;
    EXPECT_EQ(w.find("cpu_checkpointing"), std::string::npos) << w;
  }
}

TEST(ConfigLoad, UnsupportedDeepSpeedKeysWarnAndLoadingGoesOn) {
  ConfigReport r = check_config(R"({
  "train_batch_size": 8,
  "tensorboard": {"enabled": true},
  "wandb": {"enabled": true},
  "comet": {"enabled": false},
  "zero_allow_untested_optimizer": false,
  "zero_optimization": {"stage": 2, "round_robin_gradients": true}
})",
                                ConfigFormat::kJson, {}, 1);
  ASSERT_TRUE(r.errors.empty()) << r.errors[0];
  ASSERT_TRUE(r.config);
  // tensorboard acts (train/monitor); a disabled comet block means what zerotorch does.
  ASSERT_EQ(r.warnings.size(), 3u);
  EXPECT_EQ(r.warnings[0].rfind("zero_optimization.round_robin_gradients:", 0), 0u);
  std::string all;
  for (const auto& w : r.warnings) all += w + "\n";
  for (const char* key : {"wandb:", "zero_allow_untested_optimizer:"}) {
    EXPECT_NE(all.find(key), std::string::npos) << key;
  }
}

// ZeRO-Infinity's optimizer offload (DeepSpeed's nvme example configs): device nvme, the aio
// block (thread_count also as intra_op_parallelism), sub_group_size and the pipeline flags reach
// EngineOptions; AdamW steps the host chunks with CPUAdam (the kind the engine resolves for a
// master in host memory).
TEST(ConfigLoad, NvmeOptimizerOffloadFillsEngineOptions) {
  ConfigReport r = check_config(R"({
  "train_batch_size": 8,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
  "zero_optimization": {"stage": 3, "sub_group_size": 1e7,
    "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "buffer_count": 5,
                          "pipeline_read": true, "pipeline_write": false}},
  "aio": {"block_size": 262144, "queue_depth": 32, "intra_op_parallelism": 2,
          "single_submit": true, "overlap_events": false}
})",
                                ConfigFormat::kJson, {}, 1);
  ASSERT_TRUE(r.errors.empty()) << r.errors[0];
  for (const auto& w : r.warnings) {
    EXPECT_EQ(w.find("aio"), std::string::npos) << w;
    EXPECT_EQ(w.find("sub_group_size"), std::string::npos) << w;
    EXPECT_EQ(w.find("pipeline"), std::string::npos) << w;
  }
  const EngineOptions o = engine_options_from_config(*r.config);
  EXPECT_TRUE(o.optimizer_offloaded());
  EXPECT_EQ(o.optimizer.type, OptimizerType::kAdamW);
  EXPECT_EQ(optim::resolve_for_device(o.optimizer, c10::Device(c10::kCPU)).type,
            OptimizerType::kCpuAdam);
  EXPECT_EQ(o.offload_optimizer.nvme_path, "/local_nvme");
  EXPECT_EQ(o.sub_group_size, 10'000'000);
  EXPECT_EQ(o.offload_optimizer.buffer_count, 5);
  EXPECT_TRUE(o.offload_optimizer.pipeline_read);
  EXPECT_FALSE(o.offload_optimizer.pipeline_write);
  EXPECT_EQ(o.aio.block_size, 262144);
  EXPECT_EQ(o.aio.queue_depth, 32);
  EXPECT_EQ(o.aio.thread_count, 2);
  EXPECT_TRUE(o.aio.single_submit);
  EXPECT_FALSE(o.aio.overlap_events);
  // CPU offload leaves the NVMe options empty.
  Config cpu =
      yaml("train_batch_size: 8\nzero_optimization: {stage: 2, offload_optimizer: {device: cpu}}");
  EXPECT_FALSE(engine_options_from_config(cpu).optimizer_on_nvme());
}

// With only the parameter shards on NVMe (stage 3) the aio block drives their swapper: no
// warning, and aio.use_io_uring false (the pread/pwrite path) reaches the engine.
TEST(ConfigLoad, AioActsWithParametersOnNvmeAlone) {
  ConfigReport r = check_config(R"({
  "train_batch_size": 8,
  "zero_optimization": {"stage": 3,
    "offload_param": {"device": "nvme", "nvme_path": "/local_nvme"}},
  "aio": {"queue_depth": 16, "use_io_uring": false}
})",
                                ConfigFormat::kJson, {}, 1);
  ASSERT_TRUE(r.errors.empty()) << r.errors[0];
  for (const auto& w : r.warnings) EXPECT_EQ(w.find("aio"), std::string::npos) << w;
  const EngineOptions o = engine_options_from_config(*r.config);
  EXPECT_FALSE(o.aio.use_io_uring);
  EXPECT_EQ(o.aio.queue_depth, 16);
  EXPECT_TRUE(aio::AioOptions{}.use_io_uring);  // io_uring where the machine has it, by default
}

// Without NVMe offload the aio block and the pipeline flags change nothing: one warning each.
TEST(ConfigLoad, AioAndPipelineKeysWarnWithoutNvme) {
  ConfigReport r = check_config(R"({
  "train_batch_size": 8,
  "zero_optimization": {"stage": 2,
    "offload_optimizer": {"device": "cpu", "pipeline_read": true}},
  "aio": {"queue_depth": 16}
})",
                                ConfigFormat::kJson, {}, 1);
  ASSERT_TRUE(r.errors.empty()) << r.errors[0];
  std::string all;
  for (const auto& w : r.warnings) all += w + "\n";
  EXPECT_NE(all.find("aio.queue_depth: no effect"), std::string::npos) << all;
  EXPECT_NE(all.find("zero_optimization.offload_optimizer.pipeline_read: no effect"),
            std::string::npos)
      << all;
}

TEST(ConfigLoad, JsonWithTabsAndNulls) {
  Config c = parse_config(
      "{\n\t\"train_batch_size\": 4,\n\t\"communication_data_type\": null,\n"
      "\t\"activation_checkpointing\": {\"number_checkpoints\": null}\n}",
      ConfigFormat::kJson, {}, 1);
  EXPECT_FALSE(c.communication_data_type);
  EXPECT_FALSE(c.activation_checkpointing.number_checkpoints);
  Config d = parse_config(R"({"train_batch_size": 4, "communication_data_type": "bf16"})",
                          ConfigFormat::kJson, {}, 1);
  EXPECT_EQ(d.communication_data_type, DType::kBf16);
}

TEST(ConfigLoad, ErrorsAreThrownAsOneLine) {
  try {
    yaml("train_batch_size: 0\nzero_optimization: {stgae: 1}\nfp16: {enabled: yes}");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.message();
    EXPECT_EQ(m.find('\n'), std::string::npos);
    EXPECT_NE(m.find("3 errors"), std::string::npos) << m;
    EXPECT_NE(m.find("zero_optimization.stgae: unknown key; did you mean 'stage'?"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("fp16.enabled"), std::string::npos) << m;
    EXPECT_NE(m.find("train_batch_size"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

// DeepSpeed's comms_logger block reaches the communicator's options (parallel/comms_logger.h),
// and a typo inside it is named.
TEST(ConfigLoad, CommsLoggerReachesTheCommunicator) {
  ConfigReport r = check_config(R"({"train_batch_size": 8, "comms_logger": {"enabled": true,
    "verbose": true, "prof_all": false, "prof_ops": ["all_reduce", "all_gather"], "debug": true}})",
                                ConfigFormat::kJson, {}, 1);
  ASSERT_TRUE(r.errors.empty()) << r.errors[0];
  ASSERT_TRUE(r.warnings.empty()) << r.warnings[0];
  const dist::CommOptions o = comm_options_from_config(*r.config);
  EXPECT_TRUE(o.comms_logger.enabled);
  EXPECT_TRUE(o.comms_logger.verbose);
  EXPECT_FALSE(o.comms_logger.prof_all);
  EXPECT_EQ(o.comms_logger.prof_ops, (std::vector<std::string>{"all_reduce", "all_gather"}));
  EXPECT_TRUE(o.comms_logger.debug);
  EXPECT_FALSE(comm_options_from_config(Config{}).comms_logger.enabled);
  ConfigReport typo = check_config(R"({"train_batch_size": 8, "comms_logger": {"enable": true}})",
                                   ConfigFormat::kJson, {}, 1);
  std::string all;
  for (const auto& m : typo.errors) all += m + "\n";
  for (const auto& m : typo.warnings) all += m + "\n";
  EXPECT_NE(all.find("comms_logger.enable"), std::string::npos) << all;
}

// The backend as the config names it reaches the communicator as the same enum, never as text.
TEST(ConfigLoad, BackendReachesTheCommunicatorTyped) {
  for (const char* name : {"auto", "mpi", "gloo", "nccl"}) {
    const Config c =
        yaml(std::string("train_batch_size: 8\ncommunication: {backend: ") + name + "}");
    EXPECT_STREQ(dist::backend_name(comm_options_from_config(c).backend), name);
  }
  EXPECT_THROW(dist::parse_backend("tcp"), Error);
}

// DeepSpeed's dataloader_drop_last (its deepspeed_io loader) sets data.drop_last, which every
// loader here follows; unset, data.drop_last stands as given.
TEST(ConfigLoad, DataloaderDropLastSetsTheLoadersDropLast) {
  EXPECT_TRUE(yaml("train_batch_size: 8\ndataloader_drop_last: true\n").data.drop_last);
  EXPECT_FALSE(yaml("train_batch_size: 8\ndataloader_drop_last: false\n").data.drop_last);
  EXPECT_TRUE(yaml("train_batch_size: 8\ndata: {drop_last: true}\n").data.drop_last);
  EXPECT_FALSE(yaml("train_batch_size: 8\n").data.drop_last);
}

// The blocks a file gives, read as the loader reads it (hjson-lenient JSON, YAML); no defaults.
TEST(ConfigLoad, FileKeysAreTheBlocksAsWritten) {
  const fs::path dir = fs::temp_directory_path() / ("zt_config_keys_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream(dir / "a.json") << "{\n  // a comment, as hjson allows\n  \"optimizer\": "
                                     "{\"type\": \"AdamW\"},\n  \"train_batch_size\": 8,\n}\n";
    std::ofstream(dir / "b.yaml") << "scheduler:\n  type: WarmupLR\nparameter_groups: {}\n";
  }
  EXPECT_EQ(config_file_keys((dir / "a.json").string()),
            (std::vector<std::string>{"optimizer", "train_batch_size"}));
  EXPECT_EQ(config_file_keys((dir / "b.yaml").string()),
            (std::vector<std::string>{"scheduler", "parameter_groups"}));
  EXPECT_THROW(config_file_keys((dir / "missing.json").string()), Error);
  fs::remove_all(dir);
}

// DeepSpeed's checkpoint.writer block (runtime/model_checkpointing/config.py): decoupled turns
// on background saves; its values are checked as DeepSpeed checks them (type and data_parallel
// in any case); its I/O tuning keys and parallel_write.pipeline_stage warn once each.
TEST(ConfigLoad, CheckpointWriterBlock) {
  ConfigReport on = check_config(
      R"({"train_batch_size": 8, "checkpoint": {"writer": {"decoupled": true, "type": "Fast"}}})",
      ConfigFormat::kJson, {}, 1);
  ASSERT_TRUE(on.errors.empty()) << on.errors[0];
  ASSERT_TRUE(on.warnings.empty()) << on.warnings[0];
  EXPECT_TRUE(on.config->checkpoint.writer.decoupled);
  EXPECT_FALSE(Config{}.checkpoint.writer.decoupled);
  ConfigReport tuned = check_config(R"({"train_batch_size": 8, "checkpoint": {
      "writer": {"type": "mock", "io_buffer_size": 1e6, "io_multiplier": 2,
                 "data_parallel": "socket", "show_statistics": true},
      "parallel_write": {"pipeline_stage": true}}})",
                                    ConfigFormat::kJson, {}, 1);
  ASSERT_TRUE(tuned.errors.empty()) << tuned.errors[0];
  std::string warned;
  for (const auto& m : tuned.warnings) warned += m + "\n";
  for (const char* key :
       {"checkpoint.writer.type", "checkpoint.writer.io_buffer_size",
        "checkpoint.writer.io_multiplier", "checkpoint.writer.data_parallel",
        "checkpoint.writer.show_statistics", "checkpoint.parallel_write.pipeline_stage"}) {
    EXPECT_NE(warned.find(std::string(key) + ": no effect"), std::string::npos) << key << warned;
  }
  ConfigReport bad = check_config(R"({"train_batch_size": 8, "checkpoint": {
      "writer": {"type": "turbo", "data_parallel": "rack", "io_multiplier": 0}}})",
                                  ConfigFormat::kJson, {}, 1);
  std::string errors;
  for (const auto& m : bad.errors) errors += m + "\n";
  for (const char* key : {"checkpoint.writer.type", "checkpoint.writer.data_parallel",
                          "checkpoint.writer.io_multiplier"}) {
    EXPECT_NE(errors.find(key), std::string::npos) << key << errors;
  }
}

}  // namespace
}  // namespace zt
