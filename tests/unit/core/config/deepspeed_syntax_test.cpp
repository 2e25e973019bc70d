// DeepSpeed's config syntax and forms: hjson's leniencies (comments, trailing and missing commas)
// with line and column kept, the legacy forms today's DeepSpeed still reads, strict blocks vs the
// lenient top level, "auto" as the Hugging Face Trainer fills it, and the keys zerotorch refuses.
#include <string>

#include <gtest/gtest.h>

#include "core/config/config.h"
#include "core/config/engine_config.h"
#include "core/config/hjson.h"
#include "tests/unit/core/config/trainer_defaults.h"

namespace zt {
namespace {

ConfigReport json(const std::string& text, const ProgramValues& p = {}, int world_size = 1) {
  return check_config(text, ConfigFormat::kJson, {}, world_size, p);
}

std::string all(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

bool has_line_starting(const std::vector<std::string>& lines, const std::string& prefix) {
  for (const auto& l : lines) {
    if (l.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

TEST(DeepSpeedSyntax, HjsonCommentsAndCommas) {
  ConfigReport r = json(R"({
  // a line comment
  "train_batch_size": 8,   # another one
  /* a block
     comment */ "gradient_accumulation_steps": 2
  "zero_optimization": {
    "stage": 2,
    "contiguous_gradients": true
    "overlap_comm": true,
  },
  "fp16": {"enabled": false,},
  "freeze": ["a.*", "b.*",],
})");
  ASSERT_TRUE(r.errors.empty()) << all(r.errors);
  EXPECT_EQ(r.config->train_batch_size, 8);
  EXPECT_EQ(r.config->gradient_accumulation_steps, 2);
  EXPECT_EQ(r.config->zero_optimization.stage, 2);
  EXPECT_EQ(r.config->freeze.size(), 2u);
}

TEST(DeepSpeedSyntax, HjsonKeepsLinesAndColumns) {
  const std::string in = "{\n  \"a\": 1 // c\n  \"b\": [1, 2,],\n}\n";
  config_detail::HjsonResult out = config_detail::hjson_to_json(in);
  ASSERT_TRUE(out.error.empty()) << out.error;
  EXPECT_EQ(out.json, "{\n  \"a\": 1,     \n  \"b\": [1, 2 ] \n}\n");
  // A syntax error after a comment is reported where it is in the file.
  ConfigReport r =
      json("{\n  // comment\n  \"train_batch_size\": 8,\n  \"fp16\": {\"enabled\": ]\n}");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].rfind("line 4, column ", 0), 0u) << r.errors[0];
  ConfigReport open = json("{\"train_batch_size\": 8 /* never closed\n}");
  ASSERT_EQ(open.errors.size(), 1u);
  EXPECT_EQ(open.errors[0].rfind("line 1, column 24:", 0), 0u) << open.errors[0];
  // Comment markers inside strings are text.
  config_detail::HjsonResult s = config_detail::hjson_to_json(R"({"a": "x // y # z /* w */"})");
  EXPECT_EQ(s.json, R"({"a": "x // y # z /* w */"})");
}

TEST(DeepSpeedSyntax, LegacyZeroBoolean) {
  ConfigReport on = json(R"({"train_batch_size": 8, "zero_optimization": true})");
  ASSERT_TRUE(on.errors.empty()) << all(on.errors);
  EXPECT_EQ(on.config->zero_optimization.stage, 1);
  EXPECT_TRUE(has_line_starting(on.warnings, "zero_optimization: the boolean form is deprecated"))
      << all(on.warnings);
  ConfigReport off = json(R"({"train_batch_size": 8, "zero_optimization": false})");
  ASSERT_TRUE(off.errors.empty()) << all(off.errors);
  EXPECT_EQ(off.config->zero_optimization.stage, 0);
}

TEST(DeepSpeedSyntax, LegacyCpuOffloadFlags) {
  ConfigReport r = json(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2,
    "cpu_offload": true, "cpu_offload_use_pin_memory": true}})");
  ASSERT_TRUE(r.errors.empty()) << all(r.errors);
  EXPECT_EQ(r.config->zero_optimization.offload_optimizer.device, OffloadDevice::kCpu);
  EXPECT_TRUE(has_line_starting(r.warnings, "zero_optimization.cpu_offload: deprecated"));
  EXPECT_TRUE(
      has_line_starting(r.warnings, "zero_optimization.cpu_offload_use_pin_memory: deprecated"));
  // cpu_offload_param: parameter offload to the CPU.
  ConfigReport p = json(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
    "cpu_offload_param": true}})");
  ASSERT_TRUE(p.errors.empty()) << all(p.errors);
  EXPECT_EQ(p.config->zero_optimization.offload_param.device, OffloadDevice::kCpu);
  // The plural is not DeepSpeed's name: an unknown key in a strict block.
  ConfigReport plural = json(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
    "cpu_offload_params": true}})");
  EXPECT_TRUE(has_line_starting(plural.errors, "zero_optimization.cpu_offload_params: unknown key"))
      << all(plural.errors);
}

TEST(DeepSpeedSyntax, AliasesAndNames) {
  ConfigReport r = json(R"({"train_batch_size": 8,
    "bfloat16": {"enabled": true},
    "zero_optimization": {"stage": 3, "max_live_parameters": 0, "prefetch_bucket_size": 10,
      "param_persistence_threshold": 5, "gather_16bit_weights_on_model_save": true},
    "optimizer": {"type": "adamw", "params": {"lr": 0.1}},
    "scheduler": {"type": "warmuplr", "params": {"warmup_num_steps": 3}}})");
  ASSERT_TRUE(r.errors.empty()) << all(r.errors);
  EXPECT_TRUE(r.config->bf16.enabled);
  EXPECT_EQ(r.config->zero_optimization.stage3_prefetch_bucket_size, 10);
  EXPECT_EQ(r.config->zero_optimization.stage3_param_persistence_threshold, 5);
  EXPECT_TRUE(r.config->zero_optimization.stage3_gather_16bit_weights_on_model_save);
  EXPECT_EQ(r.config->optimizer->type, OptimizerType::kAdamW);
}

TEST(DeepSpeedSyntax, StrictBlocksLenientTop) {
  ConfigReport r = json(R"({"train_batch_size": 8, "cuda_visible_devices": 0,
    "activation_checkpointing": {"comment": "x"}})");
  ASSERT_TRUE(r.errors.empty()) << all(r.errors);
  EXPECT_TRUE(has_line_starting(r.warnings, "cuda_visible_devices: unknown key"))
      << all(r.warnings);
  EXPECT_TRUE(has_line_starting(r.warnings, "activation_checkpointing.comment: unknown key"));
  for (const char* bad :
       {R"("zero_optimization": {"stage": 3, "stage3_param_persitence_threshold": 1})",
        R"("fp16": {"enabled": true, "opt_level": "O2"})",
        R"("bf16": {"enabled": true, "loss_scale": 0})",
        R"("zero_optimization": {"offload_optimizer": {"device": "cpu", "x": 1}})",
        R"("csv_monitor": {"enabled": true, "path": "x"})"}) {
    ConfigReport s = json(std::string(R"({"train_batch_size": 8, )") + bad + "}");
    ASSERT_FALSE(s.errors.empty()) << bad;
    EXPECT_NE(s.errors[0].find("unknown key"), std::string::npos) << s.errors[0];
  }
  ConfigReport typo = json(
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "stage3_param_persitence_threshold": 1}})");
  EXPECT_NE(all(typo.errors).find("did you mean 'stage3_param_persistence_threshold'?"),
            std::string::npos)
      << all(typo.errors);
}

TEST(DeepSpeedSyntax, IntegerFieldsAsDeepSpeedTypesThem) {
  ConfigReport r =
      json(R"({"train_batch_size": 8, "fp16": {"enabled": true, "min_loss_scale": 1e-10}})");
  EXPECT_TRUE(has_line_starting(r.errors, "fp16.min_loss_scale: must be an integer"))
      << all(r.errors);
  ConfigReport d = json(R"({"train_batch_size": 8, "communication_data_type": "bfp16"})");
  EXPECT_TRUE(
      has_line_starting(d.errors, "communication_data_type: expected one of fp32, fp16, bf16"))
      << all(d.errors);
  ConfigReport reuse = json(
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "stage3_max_reuse_distance": -1}})");
  EXPECT_TRUE(has_line_starting(reuse.errors, "zero_optimization.stage3_max_reuse_distance:"));
}

TEST(DeepSpeedSyntax, UnsupportedFeaturesWarnOnceOrRefuse) {
  ConfigReport r = json(R"({"train_batch_size": 8,
    "eigenvalue": {"enabled": true}, "wandb": {"enabled": true}, "pipeline": {"stages": 2},
    "comms_logger": {"enabled": false}, "autotuning": {"enabled": false}})");
  ASSERT_TRUE(r.errors.empty()) << all(r.errors);
  EXPECT_EQ(r.warnings.size(), 3u) << all(r.warnings);
  for (const char* key : {"eigenvalue:", "wandb:", "pipeline:"}) {
    EXPECT_TRUE(has_line_starting(r.warnings, key)) << key << "\n" << all(r.warnings);
  }
  for (const char* refused :
       {R"("progressive_layer_drop": {"enabled": true})",
        R"("curriculum_learning": {"enabled": true})",
        R"("zero_optimization": {"stage": 3, "zeropp_loco_param": {"err_beta": 0.8}})",
        R"("fp16": {"enabled": true, "fp16_master_weights_and_grads": true})"}) {
    ConfigReport s = json(std::string(R"({"train_batch_size": 8, )") + refused + "}");
    ASSERT_EQ(s.errors.size(), 1u) << refused;
    EXPECT_NE(s.errors[0].find("changes memory or numerics"), std::string::npos) << s.errors[0];
  }
}

// sequence_parallel_size acts (DeepSpeedConfig): the batch triple counts world / sp data-parallel
// ranks; it must divide the ranks; under it seq_parallel_communication_data_type (fp32 unless
// given) is the gradient reduction's dtype, and without it that key says it does nothing.
TEST(DeepSpeedSyntax, SequenceParallelSizeActsOnTheBatchAndTheReductionDtype) {
  ConfigReport r = json(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3,
    "sequence_parallel_size": 2, "bf16": {"enabled": true}})",
                        {}, 8);
  ASSERT_TRUE(r.config) << all(r.errors);
  EXPECT_EQ(r.config->train_batch_size, 2 * 3 * 4);  // 4 data-parallel ranks of 8
  EngineOptions o = engine_options_from_config(*r.config, {});
  EXPECT_EQ(o.sequence_parallel_size, 2);
  EXPECT_EQ(o.communication_dtype, at::kFloat);  // DeepSpeed's fp32 default, not bf16
  ConfigReport bf = json(R"({"train_batch_size": 8, "sequence_parallel_size": 4,
    "seq_parallel_communication_data_type": "bf16"})",
                         {}, 8);
  ASSERT_TRUE(bf.config) << all(bf.errors);
  EXPECT_EQ(bf.config->train_micro_batch_size_per_gpu, 4);  // 8 over 2 data-parallel ranks
  EXPECT_EQ(engine_options_from_config(*bf.config, {}).communication_dtype, at::kBFloat16);

  ConfigReport odd = json(R"({"train_batch_size": 8, "sequence_parallel_size": 3})", {}, 8);
  ASSERT_EQ(odd.errors.size(), 1u) << all(odd.errors);
  EXPECT_NE(odd.errors[0].find("sequence_parallel_size"), std::string::npos) << odd.errors[0];
  EXPECT_NE(odd.errors[0].find("must divide the number of ranks (8)"), std::string::npos);

  ConfigReport idle =
      json(R"({"train_batch_size": 8, "seq_parallel_communication_data_type": "fp16"})");
  ASSERT_TRUE(idle.config) << all(idle.errors);
  EXPECT_TRUE(has_line_starting(idle.warnings, "seq_parallel_communication_data_type: no effect"))
      << all(idle.warnings);
}

// The tensor_parallel block acts (DeepSpeed's TPTrainingConfig): autotp_size ranks split each
// layer, so the batch triple counts world / (sp · tp) data-parallel ranks; it must divide the ranks
// with sequence_parallel_size; tp.tp_size is 1 or autotp_size (DeepSpeed's _configure_tensor_
// parallel raises otherwise); the presets are the LLaMA family's; knobs without a counterpart warn.
TEST(DeepSpeedSyntax, TensorParallelBlockActsOnTheBatchAndTheEngine) {
  ConfigReport r = json(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3,
    "tensor_parallel": {"autotp_size": 2, "preset_model": "llama", "tp": {"tp_size": 2}}})",
                        {}, 8);
  ASSERT_TRUE(r.config) << all(r.errors);
  EXPECT_TRUE(r.warnings.empty()) << all(r.warnings);
  EXPECT_EQ(r.config->train_batch_size, 2 * 3 * 4);  // 4 data-parallel ranks of 8
  EXPECT_EQ(engine_options_from_config(*r.config, {}).tensor_parallel_size, 2);
  ConfigReport both = json(R"({"train_batch_size": 8, "sequence_parallel_size": 2,
    "tensor_parallel": {"autotp_size": 2}})",
                           {}, 8);
  ASSERT_TRUE(both.config) << all(both.errors);
  EXPECT_EQ(both.config->train_micro_batch_size_per_gpu, 4);  // 8 over 2 data-parallel ranks
  // partition_config is kept as written, for the Python front door that splits by it.
  ConfigReport patterns = json(R"({"train_batch_size": 8, "tensor_parallel": {"autotp_size": 2,
    "partition_config": {"use_default_specs": false, "layer_specs": [
      {"patterns": [".*\\.o_proj\\.weight$"], "partition_type": "row"}]}}})",
                               {}, 8);
  ASSERT_TRUE(patterns.config) << all(patterns.errors);
  EXPECT_EQ(patterns.config->tensor_parallel.partition_config.text,
            R"({"use_default_specs":false,"layer_specs":[{"patterns":[".*\\.o_proj\\.weight$"],)"
            R"("partition_type":"row"}]})");
  ConfigReport off = json(R"({"train_batch_size": 8, "tensor_parallel": {"autotp_size": 0}})");
  ASSERT_TRUE(off.config) << all(off.errors);
  EXPECT_EQ(engine_options_from_config(*off.config, {}).tensor_parallel_size, 1);

  const std::pair<const char*, const char*> bad[] = {
      {R"("tensor_parallel": {"autotp_size": 3})", "tensor_parallel.autotp_size"},
      {R"("sequence_parallel_size": 4, "tensor_parallel": {"autotp_size": 4})",
       "tensor_parallel.autotp_size"},
      {R"("tensor_parallel": {"autotp_size": 2, "tp": {"tp_size": 4}})",
       "tensor_parallel.tp.tp_size"},
      {R"("tensor_parallel": {"autotp_size": 2, "preset_model": "bloom"})",
       "tensor_parallel.preset_model"},
      {R"("tensor_parallel": {"autotp_size": 2, "vocab_parallel_lm_head": true})",
       "tensor_parallel.vocab_parallel_lm_head"},
      {R"("tensor_parallel": {"autotp_size": 2, "tp_size": 2})", "tensor_parallel.tp_size"},
      {R"("tensor_parallel": {"autotp_size": 2, "partition_config": ["row"]})",
       "tensor_parallel.partition_config"}};
  for (const auto& [block, key] : bad) {
    ConfigReport e = json(std::string(R"({"train_batch_size": 8, )") + block + "}", {}, 8);
    ASSERT_EQ(e.errors.size(), 1u) << block << "\n" << all(e.errors);
    EXPECT_EQ(e.errors[0].rfind(key, 0), 0u) << e.errors[0];
  }
  ConfigReport knob = json(R"({"train_batch_size": 8, "tensor_parallel": {"autotp_size": 2,
    "tp_overlap_comm": true, "tp": {"tp_grain_size": 64}}})",
                           {}, 8);
  ASSERT_TRUE(knob.config) << all(knob.errors);
  EXPECT_TRUE(has_line_starting(knob.warnings, "tensor_parallel.tp_overlap_comm: no effect"))
      << all(knob.warnings);
  EXPECT_TRUE(has_line_starting(knob.warnings, "tensor_parallel.tp.tp_grain_size: no effect"))
      << all(knob.warnings);
}

// The compile block (DeepSpeed 0.19's CompileConfig): deepcompile off is what engine.compile()
// does (torch.compile); DeepCompile itself is refused, its pass options warn, and keys DeepSpeed's
// block forbids are errors.
TEST(DeepSpeedSyntax, CompileBlockRefusesDeepCompileAndWarnsOnItsPasses) {
  ConfigReport off = json(R"({"train_batch_size": 8, "compile": {"deepcompile": false,
    "offload_activation_pin_memory": true}})");
  ASSERT_TRUE(off.config) << all(off.errors);
  EXPECT_TRUE(off.warnings.empty()) << all(off.warnings);
  ConfigReport on = json(R"({"train_batch_size": 8, "compile": {"deepcompile": true}})");
  ASSERT_EQ(on.errors.size(), 1u) << all(on.errors);
  EXPECT_EQ(on.errors[0].rfind("compile.deepcompile", 0), 0u) << on.errors[0];
  ConfigReport pass = json(R"({"train_batch_size": 8, "compile": {"offload_activation": true}})");
  ASSERT_TRUE(pass.config) << all(pass.errors);
  EXPECT_TRUE(has_line_starting(pass.warnings, "compile.offload_activation: no effect"))
      << all(pass.warnings);
  ConfigReport old = json(R"({"train_batch_size": 8, "compile": {"backend": "inductor"}})");
  ASSERT_EQ(old.errors.size(), 1u) << all(old.errors);
  EXPECT_NE(old.errors[0].find("compile.backend"), std::string::npos) << old.errors[0];
}

// The expert_parallel block (DeepSpeed 0.19's AutoEP): autoep_size 1 trains every expert on every
// rank, a size dividing the ranks deals them over expert groups (EngineOptions::
// expert_parallel_size); a size that does not divide them, a load_balance_coeff value (DeepSpeed
// 0.19.8 refuses it too) and routing keys away from their defaults are errors; AutoEP's kernel
// choices warn once; a disabled block is not read further, as DeepSpeed's validation returns early.
TEST(DeepSpeedSyntax, ExpertParallelBlockActsAndRefusesWhatItCannot) {
  ConfigReport one = json(R"({"train_batch_size": 8, "expert_parallel": {"enabled": true,
    "autoep_size": 1, "preset_model": "mixtral", "load_balance_coeff": null, "top_k": "auto",
    "route_scale": 1.0}})");
  ASSERT_TRUE(one.config) << all(one.errors);
  EXPECT_TRUE(one.warnings.empty()) << all(one.warnings);
  EXPECT_TRUE(one.config->expert_parallel.enabled);
  EXPECT_EQ(one.config->expert_parallel.preset_model, "mixtral");
  EXPECT_EQ(engine_options_from_config(*one.config, {}).expert_parallel_size, 1);
  ConfigReport off = json(R"({"train_batch_size": 8, "expert_parallel": {"enabled": false,
    "autoep_size": 4}})");
  ASSERT_TRUE(off.config) << all(off.errors);
  EXPECT_EQ(off.config->expert_parallel.size(), 1);
  ConfigReport two = json(R"({"train_batch_size": 8, "expert_parallel": {"enabled": true,
    "autoep_size": 2}})",
                          {}, 4);
  ASSERT_TRUE(two.config) << all(two.errors);
  EXPECT_EQ(engine_options_from_config(*two.config, {}).expert_parallel_size, 2);
  for (const char* bad : {R"("autoep_size": 3)", R"("load_balance_coeff": 0.001)", R"("top_k": 2)",
                          R"("route_norm": true)"}) {
    ConfigReport r =
        json(std::string(R"({"train_batch_size": 8, "expert_parallel": {"enabled": true, )") + bad +
                 "}}",
             {}, 4);
    ASSERT_EQ(r.errors.size(), 1u) << bad << ": " << all(r.errors);
    EXPECT_EQ(r.errors[0].rfind("expert_parallel.", 0), 0u) << r.errors[0];
  }
  ConfigReport knob = json(R"({"train_batch_size": 8, "expert_parallel": {"enabled": true,
    "use_grouped_mm": false}})");
  ASSERT_TRUE(knob.config) << all(knob.errors);
  EXPECT_TRUE(has_line_starting(knob.warnings, "expert_parallel.use_grouped_mm: no effect"))
      << all(knob.warnings);
}

// ZeRO++'s quantized collectives act at stage 3 and say once where they do not.
TEST(DeepSpeedSyntax, QuantizedCollectivesActAtStage3AndWarnBelow) {
  ConfigReport on = json(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
    "zero_quantized_weights": true, "zero_quantized_gradients": true,
    "zero_quantized_nontrainable_weights": true}})");
  ASSERT_TRUE(on.errors.empty()) << all(on.errors);
  EXPECT_TRUE(on.warnings.empty()) << all(on.warnings);
  EXPECT_TRUE(on.config->zero_optimization.zero_quantized_weights);
  EXPECT_TRUE(on.config->zero_optimization.zero_quantized_gradients);
  EXPECT_TRUE(on.config->zero_optimization.zero_quantized_nontrainable_weights);
  ConfigReport below = json(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2,
    "zero_quantized_weights": true, "zero_quantized_gradients": true,
    "zero_quantized_nontrainable_weights": true}})");
  ASSERT_TRUE(below.errors.empty()) << all(below.errors);
  EXPECT_TRUE(has_line_starting(below.warnings, "zero_optimization.zero_quantized_weights:"))
      << all(below.warnings);
  EXPECT_TRUE(has_line_starting(below.warnings, "zero_optimization.zero_quantized_gradients:"))
      << all(below.warnings);
  EXPECT_TRUE(
      has_line_starting(below.warnings, "zero_optimization.zero_quantized_nontrainable_weights:"))
      << all(below.warnings);
}

TEST(DeepSpeedSyntax, OptimizersWeDoNotHaveNameWhatWeHave) {
  ConfigReport r = json(R"({"train_batch_size": 8, "optimizer": {"type": "OnebitAdam",
    "params": {"lr": 1e-3, "freeze_step": 10}}})");
  ASSERT_FALSE(r.errors.empty());
  EXPECT_EQ(r.errors[0].rfind("optimizer.type: 'OnebitAdam' is not implemented by zerotorch (1-bit "
                              "Adam",
                              0),
            0u)
      << r.errors[0];
  EXPECT_NE(r.errors[0].find("available: Adam, AdamW, SGD"), std::string::npos) << r.errors[0];
  ConfigReport lamb = json(R"({"train_batch_size": 8, "optimizer": {"type": "Lamb",
    "params": {"lr": 1e-3, "max_coeff": 0.3, "min_coeff": 0.01, "weight_decay": 0.01}}})");
  ASSERT_TRUE(lamb.errors.empty()) << all(lamb.errors);
  EXPECT_EQ(lamb.config->optimizer->type, OptimizerType::kLamb);
  EXPECT_EQ(lamb.config->optimizer->max_coeff, 0.3);
}

// offload_param (zero/offload_config.py's DeepSpeedZeroOffloadParamConfig): every key reaches the
// engine; below stage 3 DeepSpeed never reads it, and zerotorch says so once.
TEST(DeepSpeedSyntax, OffloadParamReachesTheEngine) {
  ConfigReport r = json(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
    "offload_param": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": true,
      "buffer_count": 6, "buffer_size": 2e8, "max_in_cpu": 1e8}},
    "aio": {"block_size": 262144, "queue_depth": 16}})");
  ASSERT_TRUE(r.errors.empty()) << all(r.errors);
  const zt::EngineOptions o = zt::engine_options_from_config(*r.config);
  EXPECT_EQ(o.offload_param.device, zt::OffloadDevice::kNvme);
  EXPECT_EQ(o.offload_param.nvme_path, "/local_nvme");
  EXPECT_TRUE(o.offload_param.pin_memory);
  EXPECT_EQ(o.offload_param.buffer_count, 6);
  EXPECT_EQ(o.offload_param.buffer_size, 200000000);
  EXPECT_EQ(o.offload_param.max_in_cpu, 100000000);
  EXPECT_EQ(o.aio.block_size, 262144);
  EXPECT_EQ(o.aio.queue_depth, 16);
  EXPECT_FALSE(o.optimizer_offloaded());

  ConfigReport cpu = json(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3,
    "offload_param": {"device": "cpu", "pin_memory": true}}})");
  ASSERT_TRUE(cpu.errors.empty()) << all(cpu.errors);
  EXPECT_EQ(zt::engine_options_from_config(*cpu.config).offload_param.device,
            zt::OffloadDevice::kCpu);

  ConfigReport stage2 = json(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2,
    "offload_param": {"device": "cpu"}}})");
  ASSERT_TRUE(stage2.errors.empty()) << all(stage2.errors);
  EXPECT_TRUE(has_line_starting(stage2.warnings,
                                "zero_optimization.offload_param.device: cpu "
                                "offload is ignored at zero_optimization.stage 2"))
      << all(stage2.warnings);
  EXPECT_EQ(zt::engine_options_from_config(*stage2.config).offload_param.device,
            zt::OffloadDevice::kNone);

  // Likewise offload_optimizer at stage 0 (DeepSpeed builds no ZeRO optimizer there): the warning
  // says it is ignored, and the engine does not offload.
  ConfigReport stage0 = json(R"({"train_batch_size": 8, "zero_optimization": {"stage": 0,
    "offload_optimizer": {"device": "cpu"}}})");
  ASSERT_TRUE(stage0.errors.empty()) << all(stage0.errors);
  EXPECT_TRUE(has_line_starting(stage0.warnings,
                                "zero_optimization.offload_optimizer.device: cpu "
                                "offload is ignored at zero_optimization.stage 0"))
      << all(stage0.warnings);
  EXPECT_FALSE(zt::engine_options_from_config(*stage0.config).optimizer_offloaded());
}

using zt::config_test::trainer_defaults;

TEST(DeepSpeedSyntax, AutoAsTheTrainerFillsIt) {
  const std::string text = R"({
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
    "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
      "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto",
      "warmup_max_lr": "auto", "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
      "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"}})";
  ConfigReport r = json(text, trainer_defaults(), 2);
  ASSERT_TRUE(r.errors.empty()) << all(r.errors);
  Config c = *r.config;
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 8);
  EXPECT_EQ(c.train_batch_size, 16);
  EXPECT_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(c.optimizer->lr, 5e-5);
  EXPECT_EQ(c.scheduler->warmup_max_lr, 5e-5);
  EXPECT_EQ(c.scheduler->warmup_num_steps, 0);
  EXPECT_TRUE(has_line_starting(r.autos, "train_micro_batch_size_per_gpu = 8")) << all(r.autos);
  EXPECT_TRUE(has_line_starting(r.autos, "zero_optimization.reduce_bucket_size: pending"))
      << all(r.autos);
  // The model and the step count come later: resolve_program_autos fills what is pending.
  ASSERT_EQ(c.pending_autos.size(), 4u);
  ProgramValues later;
  later.hidden_size = 1024;
  later.total_steps = 100;
  std::vector<std::string> notes = resolve_program_autos(c, later);
  EXPECT_EQ(notes.size(), 4u) << all(notes);
  EXPECT_TRUE(c.pending_autos.empty());
  EXPECT_EQ(c.zero_optimization.reduce_bucket_size, 1024 * 1024);
  EXPECT_EQ(c.zero_optimization.stage3_prefetch_bucket_size, 943718);  // int(0.9 * 1024^2)
  EXPECT_EQ(c.zero_optimization.stage3_param_persistence_threshold, 10240);
  EXPECT_EQ(c.scheduler->total_num_steps, 100);
  // warmup from a ratio needs the total.
  ProgramValues ratio = trainer_defaults();
  ratio.warmup_ratio = 0.1;
  ConfigReport w = json(text, ratio, 2);
  ASSERT_TRUE(w.errors.empty()) << all(w.errors);
  Config cw = *w.config;
  ProgramValues steps;
  steps.warmup_ratio = 0.1;
  steps.total_steps = 95;
  steps.hidden_size = 8;
  resolve_program_autos(cw, steps);
  EXPECT_EQ(cw.scheduler->warmup_num_steps, 10);  // ceil(9.5)
}

}  // namespace
}  // namespace zt
