// Bad configs: each must be rejected with a message that starts with the key path at fault and
// says what is wrong.
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "core/config/config.h"

namespace zt {
namespace {

struct BadConfig {
  const char* name;
  const char* yaml;  // the config, after a valid batch line unless it sets batch keys itself
  std::vector<std::string> overrides;
  int world_size;
  const char* key;       // the message must start with "<key>:" (or "--set ...:")
  const char* fragment;  // and contain this
};

const BadConfig kBadConfigs[] = {
    {"MicsShardSizeNotDividingTheWorld",
     "train_batch_size: 12\nzero_optimization: {stage: 3, mics_shard_size: 4}",
     {},
     6,
     "zero_optimization.mics_shard_size",
     "must divide the number of ranks (6), got 4"},
    {"MicsShardSizeBelowMinusOne",
     "train_batch_size: 8\nzero_optimization: {stage: 3, mics_shard_size: -2}",
     {},
     1,
     "zero_optimization.mics_shard_size",
     "must be >= -1"},
    {"MinLossScaleNotAnInteger",
     "train_batch_size: 8\nfp16: {enabled: true, min_loss_scale: 0.5}",
     {},
     1,
     "fp16.min_loss_scale",
     "must be an integer"},
    {"UnknownNestedKey",
     "train_batch_size: 8\nzero_optimization: {stgae: 3}",
     {},
     1,
     "zero_optimization.stgae",
     "unknown key; did you mean 'stage'?"},
    {"UnknownOffloadKey",
     "train_batch_size: 8\nzero_optimization: {stage: 3, offload_param: {devise: cpu}}",
     {},
     1,
     "zero_optimization.offload_param.devise",
     "did you mean 'device'?"},
    {"OffloadParamNvmeWithoutBuffers",
     "train_batch_size: 8\nzero_optimization: {stage: 3, offload_param: {device: nvme, "
     "nvme_path: /tmp, buffer_count: 0}}",
     {},
     1,
     "zero_optimization.offload_param.buffer_count",
     "must be >= 1, got 0"},
    {"StageOutOfRange",
     "train_batch_size: 8\nzero_optimization: {stage: 4}",
     {},
     1,
     "zero_optimization.stage",
     "must be 0..3, got 4"},
    {"FractionalInteger",
     "train_batch_size: 8\nzero_optimization: {reduce_bucket_size: 2.5e0}",
     {},
     1,
     "zero_optimization.reduce_bucket_size",
     "expected an integer, got 2.5e0"},
    {"FractionalBatch",
     "train_batch_size: 7.5",
     {},
     1,
     "train_batch_size",
     "expected an integer, got 7.5"},
    {"IntegerTooLarge",
     "train_batch_size: 8\nzero_optimization: {sub_group_size: 1e30}",
     {},
     1,
     "zero_optimization.sub_group_size",
     "does not fit a 64-bit integer"},
    {"StringForBoolean",
     "train_batch_size: 8\nzero_optimization: {overlap_comm: \"true\"}",
     {},
     1,
     "zero_optimization.overlap_comm",
     "expected a boolean"},
    {"NumberForBoolean",
     "train_batch_size: 8\nfp16: {enabled: 1}",
     {},
     1,
     "fp16.enabled",
     "expected a boolean (true or false), got 1"},
    {"YesForBoolean",
     "train_batch_size: 8\nwall_clock_breakdown: yes",
     {},
     1,
     "wall_clock_breakdown",
     "expected a boolean"},
    {"QuotedNumber",
     "train_batch_size: \"8\"",
     {},
     1,
     "train_batch_size",
     "expected an integer, got \"8\" (a string)"},
    {"BlockForNumber",
     "train_batch_size: 8\ngradient_clipping: {max: 1}",
     {},
     1,
     "gradient_clipping",
     "expected a number, got a block"},
    {"NumberForBlock",
     "train_batch_size: 8\nzero_optimization: 3",
     {},
     1,
     "zero_optimization",
     "expected a block of keys, got 3"},
    {"BatchMismatch",
     "train_batch_size: 32\ntrain_micro_batch_size_per_gpu: 4\ngradient_accumulation_steps: 2",
     {},
     2,
     "train_batch_size",
     "32 != train_micro_batch_size_per_gpu 4 * gradient_accumulation_steps 2 * world size 2"},
    {"BatchNotDivisible",
     "train_batch_size: 10\ntrain_micro_batch_size_per_gpu: 4",
     {},
     1,
     "train_batch_size",
     "not divisible"},
    {"BatchMissing",
     "gradient_accumulation_steps: 4",
     {},
     1,
     "train_batch_size",
     "give train_batch_size or train_micro_batch_size_per_gpu"},
    {"BatchZero",
     "train_micro_batch_size_per_gpu: 0",
     {},
     1,
     "train_micro_batch_size_per_gpu",
     "must be >= 1, got 0"},
    {"AutoBatchUnresolved",
     "train_micro_batch_size_per_gpu: auto",
     {},
     1,
     "train_micro_batch_size_per_gpu",
     "\"auto\" could not be resolved"},
    {"AutoNotAllowed",
     "train_batch_size: 8\nzero_optimization: {stage: auto}",
     {},
     1,
     "zero_optimization.stage",
     "\"auto\" is not allowed here"},
    {"AutoLrUnresolved",
     "train_batch_size: 8\noptimizer: {type: Adam, params: {lr: auto}}",
     {},
     1,
     "optimizer.params.lr",
     "could not be resolved"},
    {"OneBitAdamNamesWhatWeHave",
     "train_batch_size: 8\noptimizer: {type: OneBitAdam, params: {lr: 0.1}}",
     {},
     1,
     "optimizer.type",
     "is not implemented by zerotorch (1-bit Adam"},
    {"AutoClippingUnresolved",
     "train_batch_size: 8\ngradient_clipping: auto",
     {},
     1,
     "gradient_clipping",
     "could not be resolved"},
    {"Fp16AndBf16",
     "train_batch_size: 8\nfp16: {enabled: true}\nbf16: {enabled: true}",
     {},
     1,
     "fp16.enabled",
     "fp16 and bf16 cannot both be enabled"},
    {"NegativeLossScale",
     "train_batch_size: 8\nfp16: {enabled: true, loss_scale: -1}",
     {},
     1,
     "fp16.loss_scale",
     "must be >= 0"},
    {"ScalePowerTooLarge",
     "train_batch_size: 8\nfp16: {initial_scale_power: 100}",
     {},
     1,
     "fp16.initial_scale_power",
     "must be 0..63, got 100"},
    {"ZeroHysteresis",
     "train_batch_size: 8\nfp16: {hysteresis: 0}",
     {},
     1,
     "fp16.hysteresis",
     "must be >= 1"},
    {"UnknownOptimizer",
     "train_batch_size: 8\noptimizer: {type: AdamWW}",
     {},
     1,
     "optimizer.type",
     "did you mean 'AdamW'?"},
    {"OptimizerParamOfOtherType",
     "train_batch_size: 8\noptimizer: {type: Adam, params: {momentum: 0.9}}",
     {},
     1,
     "optimizer.params.momentum",
     "unknown key"},
    {"OptimizerParamTypo",
     "train_batch_size: 8\noptimizer: {type: AdamW, params: {weight_decy: 0.1}}",
     {},
     1,
     "optimizer.params.weight_decy",
     "did you mean 'weight_decay'?"},
    {"BetasWrongLength",
     "train_batch_size: 8\noptimizer: {type: AdamW, params: {betas: [0.9]}}",
     {},
     1,
     "optimizer.params.betas",
     "expected 2 numbers"},
    {"BetaOutOfRange",
     "train_batch_size: 8\noptimizer: {type: AdamW, params: {betas: [0.9, 1.5]}}",
     {},
     1,
     "optimizer.params.betas",
     "each beta must be in [0, 1), got 1.5"},
    {"NegativeLr",
     "train_batch_size: 8\noptimizer: {type: SGD, params: {lr: -0.1}}",
     {},
     1,
     "optimizer.params.lr",
     "must be >= 0"},
    {"NesterovWithoutMomentum",
     "train_batch_size: 8\noptimizer: {type: SGD, params: {nesterov: true}}",
     {},
     1,
     "optimizer.params.nesterov",
     "needs momentum > 0"},
    {"UnknownScheduler",
     "train_batch_size: 8\nscheduler: {type: WarmupCosine}",
     {},
     1,
     "scheduler.type",
     "did you mean 'WarmupCosineLR'?"},
    {"SchedulerParamOfOtherType",
     "train_batch_size: 8\nscheduler: {type: WarmupLR, params: {cos_min_ratio: 0.1}}",
     {},
     1,
     "scheduler.params.cos_min_ratio",
     "unknown key (keys here: warmup_min_lr"},
    {"SchedulerMissingTotalSteps",
     "train_batch_size: 8\nscheduler: {type: WarmupDecayLR}",
     {},
     1,
     "scheduler.params.total_num_steps",
     "required by WarmupDecayLR"},
    {"SchedulerBadWarmupType",
     "train_batch_size: 8\nscheduler: {type: WarmupLR, params: {warmup_type: cosine}}",
     {},
     1,
     "scheduler.params.warmup_type",
     "expected one of log, linear, got 'cosine'"},
    {"OneCycleMissingLrs",
     "train_batch_size: 8\nscheduler: {type: OneCycle}",
     {},
     1,
     "scheduler.params.cycle_min_lr",
     "required by OneCycle"},
    {"BadOffloadDevice",
     "train_batch_size: 8\nzero_optimization: {stage: 2, offload_optimizer: {device: gpu}}",
     {},
     1,
     "zero_optimization.offload_optimizer.device",
     "expected one of none, cpu, nvme"},
    {"OptimizerOffloadToNvmeNeedsAdam",
     "train_batch_size: 8\noptimizer: {type: Lamb}\nzero_optimization: {stage: 2, "
     "offload_optimizer: {device: nvme, nvme_path: /x}}",
     {},
     1,
     "zero_optimization.offload_optimizer.device",
     "nvme steps the optimizer with CPUAdam; optimizer.type Lamb is not supported there"},
    {"OptimizerOffloadToNvmeNeedsABuffer",
     "train_batch_size: 8\nzero_optimization: {stage: 2, offload_optimizer: {device: nvme, "
     "nvme_path: /x, buffer_count: 0}}",
     {},
     1,
     "zero_optimization.offload_optimizer.buffer_count",
     "must be >= 1"},
    {"OptimizerOffloadToNvmeNeedsChunks",
     "train_batch_size: 8\nzero_optimization: {stage: 2, sub_group_size: 0, offload_optimizer: "
     "{device: nvme, nvme_path: /x}}",
     {},
     1,
     "zero_optimization.sub_group_size",
     "must be >= 1 with offload_optimizer.device nvme"},
    {"AioQueueDepthZero",
     "train_batch_size: 8\naio: {queue_depth: 0}",
     {},
     1,
     "aio.queue_depth",
     "must be 1..4096"},
    {"PartialOptimizerOffload",
     "train_batch_size: 8\nzero_optimization: {stage: 3, offload_optimizer: {device: cpu, "
     "ratio: 0.5}}",
     {},
     1,
     "zero_optimization.offload_optimizer.ratio",
     "partial optimizer offload"},
    {"NvmeWithoutPath",
     "train_batch_size: 8\nzero_optimization: {stage: 3, offload_param: {device: nvme}}",
     {},
     1,
     "zero_optimization.offload_param.nvme_path",
     "required when device is nvme"},
    {"SwaWithNvmeOptimizer",
     "train_batch_size: 8\nswa: {enabled: true}\nzero_optimization: {stage: 2, offload_optimizer: "
     "{device: nvme, nvme_path: /tmp}}",
     {},
     1,
     "swa.enabled",
     "offload_optimizer.device nvme"},
    {"OldAndNewNamesDisagree",
     "train_batch_size: 8\nzero_optimization: {stage3_gather_16bit_weights_on_model_save: true, "
     "stage3_gather_fp16_weights_on_model_save: false}",
     {},
     1,
     "zero_optimization.stage3_gather_fp16_weights_on_model_save",
     "conflicts with"},
    {"Bf16MastersNeedZero",
     "train_batch_size: 8\nbf16: {enabled: true, bf16_master_weights_and_grads: true}",
     {},
     1,
     "bf16.bf16_master_weights_and_grads",
     "needs zero_optimization.stage 1, 2 or 3"},
    {"Bf16MastersNeedBf16",
     "train_batch_size: 8\nzero_optimization: {stage: 2}\nbf16: {bf16_master_weights_and_grads: "
     "true}",
     {},
     1,
     "bf16.bf16_master_weights_and_grads",
     "needs bf16.enabled: true"},
    {"Bf16StatesNeedBf16Masters",
     "train_batch_size: 8\nzero_optimization: {stage: 2}\nbf16: {enabled: true, "
     "bf16_optimizer_states: true}",
     {},
     1,
     "bf16.bf16_optimizer_states",
     "needs bf16.bf16_master_weights_and_grads: true"},
    {"BadGradAccumDtype",
     "train_batch_size: 8\ndata_types: {grad_accum_dtype: fp8}",
     {},
     1,
     "data_types.grad_accum_dtype",
     "expected one of fp32, fp16, bf16"},
    {"BadBackend",
     "train_batch_size: 8\ncommunication: {backend: ncl}",
     {},
     1,
     "communication.backend",
     "did you mean 'nccl'?"},
    {"ZeroTimeout",
     "train_batch_size: 8\ncommunication: {timeout: 0}",
     {},
     1,
     "communication.timeout",
     "must be >= 1"},
    {"ZeroInflightReductions",
     "train_batch_size: 8\ncommunication: {max_inflight_reductions: 0}",
     {},
     1,
     "communication.max_inflight_reductions",
     "must be >= 1"},
    {"BadTagValidation",
     "train_batch_size: 8\ncheckpoint: {tag_validation: Strict}",
     {},
     1,
     "checkpoint.tag_validation",
     "expected one of Ignore, Warn, Fail"},
    {"NegativeKeepLast",
     "train_batch_size: 8\ncheckpoint: {keep_last: -1}",
     {},
     1,
     "checkpoint.keep_last",
     "must be >= 0"},
    {"BadLoadFallback",
     "train_batch_size: 8\ncheckpoint: {load_fallback: latest}",
     {},
     1,
     "checkpoint.load_fallback",
     "expected one of none, previous"},
    {"DataMaxLengthZero",
     "train_batch_size: 8\ndata: {max_length: 0}",
     {},
     1,
     "data.max_length",
     "must be >= 1"},
    {"DataTokenBudgetTooSmall",
     "train_batch_size: 8\ndata: {max_length: 512, max_tokens: 100}",
     {},
     1,
     "data.max_tokens",
     "cannot hold one sample"},
    {"DataPadMultipleZero",
     "train_batch_size: 8\ndata: {pad_to_multiple: 0}",
     {},
     1,
     "data.pad_to_multiple",
     "must be >= 1"},
    {"FreezeNotAList",
     "train_batch_size: 8\nfreeze: embed",
     {},
     1,
     "freeze",
     "expected a list of strings"},
    {"LayerDecayOutOfRange",
     "train_batch_size: 8\nparameter_groups: {layer_lr_decay: 0}",
     {},
     1,
     "parameter_groups.layer_lr_decay",
     "must be in (0, 1]"},
    {"OverrideWithoutEquals",
     "train_batch_size: 8",
     {"zero_optimization.stage"},
     1,
     "--set zero_optimization.stage",
     "expected key=value"},
    {"OverrideThroughScalar",
     "train_batch_size: 8",
     {"train_batch_size.x=1"},
     1,
     "--set train_batch_size.x=1",
     "train_batch_size is not a block"},
    {"OverrideBadValue",
     "train_batch_size: 8",
     {"zero_optimization.stage=7"},
     1,
     "zero_optimization.stage",
     "must be 0..3, got 7"},
    {"OverrideUnknownKey",
     "train_batch_size: 8",
     {"zero_optimization.stagee=1"},
     1,
     "zero_optimization.stagee",
     "did you mean 'stage'?"},
    {"TopLevelNotABlock", "- 1\n- 2", {}, 1, "config", "expected a block of keys"},
    {"YamlSyntax", "train_batch_size: [8", {}, 1, "line 1, column", "YAML syntax error"},
};

// DeepSpeed reads the offload blocks only from the stage that uses them; below it they are
// accepted and ignored, with a warning here.
TEST(ConfigErrors, OffloadBelowItsStageWarns) {
  ConfigReport r = check_config(
      "train_batch_size: 8\nzero_optimization: {stage: 2, offload_param: {device: cpu}}",
      ConfigFormat::kYaml, {}, 1);
  ASSERT_TRUE(r.errors.empty()) << r.errors[0];
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0].rfind("zero_optimization.offload_param.device: cpu offload is ignored at "
                                "zero_optimization.stage 2",
                                0),
            0u)
      << r.warnings[0];
}

// Hybrid sharding is a stage-3 mode (DeepSpeed's MiCS): below stage 3 the key warns, and so does
// the two-hop gather flag, which acts only on a hybrid shard group. At stage 3 both are clean.
TEST(ConfigErrors, MicsKeysWarnWhereTheyDoNotAct) {
  ConfigReport r = check_config(
      "train_batch_size: 8\nzero_optimization: {stage: 2, mics_shard_size: 2, "
      "mics_hierarchical_params_gather: true}",
      ConfigFormat::kYaml, {}, 4);
  ASSERT_TRUE(r.errors.empty()) << r.errors[0];
  std::string all;
  for (const auto& w : r.warnings) all += w + "\n";
  EXPECT_NE(all.find("zero_optimization.mics_shard_size: no effect in zerotorch (hybrid sharding "
                     "is a stage-3 mode"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("zero_optimization.mics_hierarchical_params_gather: no effect"),
            std::string::npos)
      << all;
  ConfigReport ok = check_config(
      "train_batch_size: 8\nzero_optimization: {stage: 3, mics_shard_size: 2, "
      "mics_hierarchical_params_gather: true}",
      ConfigFormat::kYaml, {}, 4);
  ASSERT_TRUE(ok.errors.empty()) << ok.errors[0];
  EXPECT_TRUE(ok.warnings.empty()) << ok.warnings[0];
  EXPECT_EQ(ok.config->zero_optimization.mics_shard_size, 2);
}

// DeepSpeed ignores unknown top-level keys: a warning with the suggestion, not an error.
TEST(ConfigErrors, UnknownTopLevelKeysWarnWithASuggestion) {
  ConfigReport r = check_config("train_batch_size: 8\ngradient_clipin: 1.0\nstage: 3",
                                ConfigFormat::kYaml, {}, 1);
  ASSERT_TRUE(r.errors.empty()) << r.errors[0];
  std::string all;
  for (const auto& w : r.warnings) all += w + "\n";
  EXPECT_NE(all.find("gradient_clipin: unknown key; did you mean 'gradient_clipping'?; ignored"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("stage: unknown key; did you mean 'zero_optimization.stage'?; ignored"),
            std::string::npos)
      << all;
}

// Unknown top-level blocks are the program's (program_block.h), unless they look like a framework
// key (misspelt, or written at the wrong level): those warn as any unknown top-level key does and
// are not handed to the program. Only blocks can be the program's.
TEST(ConfigErrors, MisspeltOrMisplacedBlocksWarnAndAreNotProgramBlocks) {
  const std::pair<const char*, const char*> cases[] = {
      {"train_batch_size: 8\nzero_optimisation: {stage: 3}",
       "zero_optimisation: unknown key; did you mean 'zero_optimization'?"},
      {"train_batch_size: 8\noffload_optimizer: {device: cpu}",
       "offload_optimizer: unknown key; did you mean 'zero_optimization.offload_optimizer'?"},
      {"train_batch_size: 8\nmodel: 3", "model: unknown key"},
  };
  for (const auto& [yaml, warning] : cases) {
    SCOPED_TRACE(yaml);
    ConfigReport r = check_config(yaml, ConfigFormat::kYaml, {}, 1);
    ASSERT_TRUE(r.errors.empty()) << r.errors[0];
    ASSERT_TRUE(r.config.has_value());
    EXPECT_TRUE(r.config->program_blocks.empty()) << "taken as a program block";
    std::string all;
    for (const auto& w : r.warnings) all += w + "\n";
    EXPECT_NE(all.find(warning), std::string::npos) << all;
  }
}

// One test case for the whole table: each ctest case is a process that loads LibTorch, and the
// suite must stay fast. SCOPED_TRACE names the failing entry.
TEST(ConfigErrors, EachBadConfigIsRejectedNamingTheKey) {
  ASSERT_GE(std::size(kBadConfigs), 25u);
  for (const BadConfig& b : kBadConfigs) {
    SCOPED_TRACE(b.name);
    ConfigReport r = check_config(b.yaml, ConfigFormat::kYaml, b.overrides, b.world_size);
    EXPECT_FALSE(r.config.has_value());
    bool found = false;
    std::string all;
    for (const auto& e : r.errors) {
      if (e.rfind(b.key, 0) == 0 && e.find(b.fragment) != std::string::npos) found = true;
      all += "\n  " + e;
    }
    EXPECT_TRUE(found) << "want an error starting with '" << b.key << "' containing '" << b.fragment
                       << "'; got:" << all;
    // load/parse turn the same report into one exception naming the key.
    try {
      parse_config(b.yaml, ConfigFormat::kYaml, b.overrides, b.world_size);
      ADD_FAILURE() << "parse_config accepted it";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find(b.key), std::string::npos) << e.message();
    }
  }
}

TEST(ConfigErrorsAll, EveryProblemOfAFileIsReportedInOnePass) {
  ConfigReport r = check_config(R"(
train_batch_size: 8
zero_optimization: {stgae: 3, reduce_bucket_size: 2.5}
fp16: {enabled: true, hysteresis: 0}
bf16: {enabled: true}
optimizer: {type: AdamW, params: {lr: -1}}
)",
                                ConfigFormat::kYaml, {"seed=-3"}, 1);
  EXPECT_EQ(r.errors.size(), 6u);
}

TEST(ConfigErrorsAll, MissingFileIsAnError) {
  ConfigReport r = check_config_file("/nonexistent/zt.yaml", {}, 1);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].find("/nonexistent/zt.yaml"), std::string::npos);
  EXPECT_THROW(load_config("/nonexistent/zt.yaml", {}, 1), Error);
}

}  // namespace
}  // namespace zt
