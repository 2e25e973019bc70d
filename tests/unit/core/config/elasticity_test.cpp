// The elasticity block: compute_elastic_config against DeepSpeed's own outputs, and the config
// path (the batch triple it decides at a world size, its errors and warnings).
#include "core/config/elasticity.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "core/config/config.h"

namespace zt {
namespace {

// One elasticity block, every key written (DeepSpeed's defaults where the input left it out).
struct Input {
  bool enabled;
  std::optional<int64_t> max_train_batch_size;
  std::vector<int64_t> micro_batch_sizes;
  int64_t min_gpus;
  int64_t max_gpus;
  double min_time;
  double version;
  bool prefer_larger_batch;
  int64_t num_gpus_per_node;
  int64_t model_parallel_size;
};

struct Row {
  const char* name;
  Input in;
  int world_size;                // 0: called without one
  const char* deepspeed_raised;  // the exception DeepSpeed raised; "" when it returned
  int64_t train_batch_size;
  std::vector<int64_t> valid_gpus;
  int64_t micro_batch_size;  // 0: none returned
};

// Produced by running DeepSpeed's compute_elastic_config (deepspeed/elasticity/elasticity.py,
// config.py and constants.py as last shipped before DeepSpeed 0.19 removed them; elasticity.py
// at its newest stored revision) on each input: tests/data/elasticity/generate_table.py prints
// these rows. DeepSpeed's TypeError row is its failure on a None list of GPU counts.
// clang-format off
const Row kDeepSpeedTable[] = {
    {"V01DeepSpeedTestNoWorld", {true, 10000, {8, 12, 16, 17}, 32, 1500, 20, 0.1, true, 1, 1}, 0, "", 9792, {32, 34, 36, 48, 51, 64, 68, 72, 96, 102, 136, 144, 153, 192, 204, 272, 288, 306, 408, 576, 612, 816, 1224}, 0},
    {"V01DeepSpeedTestWorld64", {true, 10000, {8, 12, 16, 17}, 32, 1500, 20, 0.1, true, 1, 1}, 64, "", 9792, {32, 34, 36, 48, 51, 64, 68, 72, 96, 102, 136, 144, 153, 192, 204, 272, 288, 306, 408, 576, 612, 816, 1224}, 17},
    {"V01DeepSpeedTestWorld128Invalid", {true, 10000, {8, 12, 16, 17}, 32, 1500, 20, 0.1, true, 1, 1}, 128, "ElasticityIncompatibleWorldSize", 0, {}, 0},
    {"V01ProperMicroBatch", {true, 32, {1, 2, 3, 7}, 1, 1500, 20, 0.1, true, 1, 1}, 4, "", 24, {1, 2, 3, 4, 6, 8, 12, 24}, 3},
    {"V01ProperMicroBatchWorld7Invalid", {true, 32, {1, 2, 3, 7}, 1, 1500, 20, 0.1, true, 1, 1}, 7, "ElasticityIncompatibleWorldSize", 0, {}, 0},
    {"V01LcmAboveMaxSkipped", {true, 100, {8, 10, 12}, 1, 10000, 0, 0.1, true, 1, 1}, 0, "", 96, {1, 2, 3, 4, 6, 8, 12}, 0},
    {"V01LcmAboveMaxWorld2", {true, 100, {8, 10, 12}, 1, 10000, 0, 0.1, true, 1, 1}, 2, "", 96, {1, 2, 3, 4, 6, 8, 12}, 12},
    {"V01PreferSmaller", {true, 100, {8, 10, 12}, 1, 10000, 0, 0.1, false, 1, 1}, 2, "", 96, {1, 2, 3, 4, 6, 8, 12}, 12},
    {"V01TieGoesToLarger", {true, 10, {2, 3}, 1, 10000, 0, 0.1, true, 1, 1}, 2, "", 8, {1, 2, 4}, 2},
    {"V01TieGoesToSmaller", {true, 10, {2, 3}, 1, 10000, 0, 0.1, false, 1, 1}, 2, "", 6, {1, 2, 3}, 3},
    {"V01DefaultsPreferLarger", {true, 2000, {2, 4, 6}, 1, 10000, 0, 0.1, true, 1, 1}, 8, "", 1680, {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 15, 20, 21, 24, 28, 30, 35, 40, 42, 56, 60, 70, 84, 105, 120, 140, 168, 210, 280, 420, 840}, 6},
    {"V01DefaultsPreferSmaller", {true, 2000, {2, 4, 6}, 1, 10000, 0, 0.1, false, 1, 1}, 8, "", 1680, {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 15, 20, 21, 24, 28, 30, 35, 40, 42, 56, 60, 70, 84, 105, 120, 140, 168, 210, 280, 420, 840}, 6},
    {"V01MinMaxGpus", {true, 1000, {2, 4}, 4, 16, 0, 0.1, true, 1, 1}, 8, "", 960, {4, 5, 6, 8, 10, 12, 15, 16}, 4},
    {"V01BelowMinGpusInvalid", {true, 1000, {2, 4}, 4, 16, 0, 0.1, true, 1, 1}, 2, "ElasticityIncompatibleWorldSize", 0, {}, 0},
    {"V01BaseEqualsMax", {true, 12, {12}, 1, 10000, 0, 0.1, true, 1, 1}, 1, "", 12, {1}, 12},
    {"V01PastLastHcn", {true, 1441440, {1}, 1, 24, 0, 0.1, true, 1, 1}, 0, "", 720720, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 20, 21, 22, 24}, 0},
    {"V01NoValidCountPreferSmaller", {true, 3, {3}, 2, 2, 0, 0.1, false, 1, 1}, 2, "TypeError", 0, {}, 0},
    {"V02OneGpuPerNode", {true, 2000, {2, 4, 6}, 1, 10000, 0, 0.2, true, 1, 1}, 8, "", 1680, {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 15, 20, 21, 24, 28, 30, 35, 40, 42, 56, 60, 70, 84, 105, 120, 140, 168, 210, 280, 420, 840}, 6},
    {"V02DefaultVersion", {true, 2000, {2, 4, 6}, 1, 10000, 0, 0.2, true, 1, 1}, 4, "", 1680, {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 15, 20, 21, 24, 28, 30, 35, 40, 42, 56, 60, 70, 84, 105, 120, 140, 168, 210, 280, 420, 840}, 6},
    {"V02EightPerNode", {true, 1024, {4, 8}, 8, 64, 0, 0.2, true, 8, 1}, 16, "", 768, {8, 16, 24, 32, 48, 64}, 8},
    {"V02EightPerNodeOffGrid", {true, 1024, {4, 8}, 8, 64, 0, 0.2, true, 8, 1}, 12, "", 1008, {12}, 4},
    {"V02FourPerNodeThreeNodes", {true, 1000, {2, 5}, 4, 64, 0, 0.2, true, 4, 1}, 12, "", 960, {4, 8, 12, 16, 20, 24, 32, 40, 48, 60, 64}, 5},
    {"V02ModelParallel2World8", {true, 1024, {4, 8}, 8, 64, 0, 0.2, true, 8, 2}, 8, "", 960, {4, 8, 12, 16, 20, 24}, 8},
    {"V02ModelParallel2World16", {true, 1024, {4, 8}, 8, 64, 0, 0.2, true, 8, 2}, 16, "", 960, {4, 8, 12, 16, 20, 24}, 4},
    {"V02ModelParallel2TwoPerNode", {true, 512, {2, 4}, 1, 10000, 0, 0.2, true, 2, 2}, 4, "", 480, {1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 16, 20, 24, 30, 40, 48, 60, 80, 120, 240}, 4},
    {"V02FallbackPreferLarger", {true, 100, {3, 5}, 1, 4, 0, 0.2, true, 1, 1}, 7, "", 84, {7}, 3},
    {"V02FallbackPreferSmaller", {true, 100, {3, 5}, 1, 4, 0, 0.2, false, 1, 1}, 7, "", 70, {7}, 5},
    {"V02FallbackBatchZero", {true, 10, {4}, 1, 10000, 0, 0.2, true, 1, 1}, 3, "", 0, {3}, 4},
    {"V02NoWorldSize", {true, 2000, {2, 4, 6}, 1, 10000, 0, 0.2, true, 1, 1}, 0, "ElasticityConfigError", 0, {}, 0},
    {"V02NodesNotDivisibleByModelParallel", {true, 1024, {4, 8}, 1, 10000, 0, 0.2, true, 8, 3}, 16, "ElasticityError", 0, {}, 0},
    {"ErrorMicroAboveMax", {true, 4, {2, 8}, 1, 10000, 0, 0.1, true, 1, 1}, 0, "ValueError", 0, {}, 0},
    {"ErrorMicroAboveMaxPerNode", {true, 16, {4, 8}, 1, 10000, 0, 0.2, true, 4, 1}, 8, "ValueError", 0, {}, 0},
    {"ErrorVersionTooNew", {true, 2000, {2}, 1, 10000, 0, 0.3, true, 1, 1}, 0, "ElasticityConfigError", 0, {}, 0},
    {"ErrorVersionUnknown", {true, 2000, {2}, 1, 10000, 0, 0.15, true, 1, 1}, 0, "NotImplementedError", 0, {}, 0},
    {"ErrorModelParallelV01", {true, 2000, {2}, 1, 10000, 0, 0.1, true, 8, 2}, 0, "ElasticityConfigError", 0, {}, 0},
    {"ErrorDisabled", {false, 10000, {8, 12, 16, 17}, 32, 1500, 20, 0.1, true, 1, 1}, 64, "ElasticityConfigError", 0, {}, 0},
    {"ErrorMissingMax", {true, std::nullopt, {2, 4}, 1, 10000, 0, 0.2, true, 1, 1}, 0, "ElasticityConfigError", 0, {}, 0},
    {"ErrorMissingMicro", {true, 100, {}, 1, 10000, 0, 0.2, true, 1, 1}, 0, "ElasticityConfigError", 0, {}, 0},
    {"ErrorMicroNotPositive", {true, 100, {2, 0, 4}, 1, 10000, 0, 0.2, true, 1, 1}, 0, "ElasticityConfigError", 0, {}, 0},
    {"ErrorMinAboveMax", {true, 100, {2}, 8, 4, 0, 0.2, true, 1, 1}, 0, "ElasticityConfigError", 0, {}, 0},
    {"ErrorMaxGpusZero", {true, 100, {2}, 1, 0, 0, 0.2, true, 1, 1}, 0, "ElasticityConfigError", 0, {}, 0},
    {"ErrorNegativeMinTime", {true, 100, {2}, 1, 10000, -1, 0.2, true, 1, 1}, 0, "ElasticityConfigError", 0, {}, 0},
    {"ErrorGpusPerNodeZero", {true, 100, {2}, 1, 10000, 0, 0.2, true, 0, 1}, 0, "ElasticityConfigError", 0, {}, 0},
};
// clang-format on

ElasticityConfig config_of(const Input& in) {
  ElasticityConfig c;
  c.enabled = in.enabled;
  c.max_train_batch_size = in.max_train_batch_size;
  c.micro_batch_sizes = in.micro_batch_sizes;
  c.min_gpus = in.min_gpus;
  c.max_gpus = in.max_gpus;
  c.min_time = in.min_time;
  c.version = in.version;
  c.prefer_larger_batch = in.prefer_larger_batch;
  c.num_gpus_per_node = in.num_gpus_per_node;
  c.model_parallel_size = in.model_parallel_size;
  return c;
}

TEST(ElasticityTable, MatchesDeepSpeed) {
  ASSERT_GE(std::size(kDeepSpeedTable), 25u);
  for (const Row& row : kDeepSpeedTable) {
    SCOPED_TRACE(row.name);
    const ElasticityConfig c = config_of(row.in);
    if (*row.deepspeed_raised != '\0') {
      try {
        compute_elastic_config(c, row.world_size);
        ADD_FAILURE() << "DeepSpeed raised " << row.deepspeed_raised << "; zerotorch returned";
      } catch (const Error& e) {
        // One line, naming the block's key at fault.
        EXPECT_EQ(e.message().rfind("elasticity", 0), 0u) << e.message();
        EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
      }
      continue;
    }
    const ElasticResult r = compute_elastic_config(c, row.world_size);
    EXPECT_EQ(r.train_batch_size, row.train_batch_size);
    EXPECT_EQ(r.valid_gpus, row.valid_gpus);
    if (row.world_size > 0) {
      ASSERT_TRUE(r.micro_batch_size.has_value());
      EXPECT_EQ(*r.micro_batch_size, row.micro_batch_size);
    } else {
      EXPECT_FALSE(r.micro_batch_size.has_value());
    }
  }
}

TEST(ElasticityTable, ErrorsSayWhatIsWrong) {
  ElasticityConfig c;
  c.enabled = true;
  c.max_train_batch_size = 100;
  c.micro_batch_sizes = {2, 4};
  c.version = 0.1;
  auto message = [&](int world_size) {
    try {
      compute_elastic_config(c, world_size);
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("no error");
  };
  // 96 = 24 * 4: valid counts are the divisors of 48 and of 24.
  EXPECT_EQ(message(5),
            "elasticity: world size 5 is not one of the valid GPU counts [1, 2, 3, 4, 6, 8, 12, "
            "16, 24, 48]");
  c.version = 0.3;
  EXPECT_EQ(message(0), "elasticity.version: 0.3 is newer than the latest elasticity version, 0.2");
  c.version = 0.1;
  c.model_parallel_size = 2;
  EXPECT_EQ(message(0),
            "elasticity.model_parallel_size: version 0.1 does not support model parallelism "
            "(model_parallel_size 2); use version 0.2");
  c.model_parallel_size = 1;
  c.micro_batch_sizes = {2, 128};
  EXPECT_EQ(message(0),
            "elasticity.micro_batch_sizes: each must be <= max_train_batch_size (100), got [2, "
            "128]");
  c.enabled = false;
  EXPECT_EQ(message(0).rfind("elasticity.enabled: elasticity is disabled", 0), 0u);
}

// The batch triple DeepSpeed's runtime sets at each world size (the same generator:
// accumulation = train_batch_size // (micro * world size)).
struct RuntimeRow {
  const char* name;
  const char* block;  // the elasticity block, JSON
  int world_size;
  int64_t train_batch_size;
  int64_t micro_batch_size;
  int64_t gradient_accumulation_steps;
};

// clang-format off
const RuntimeRow kDeepSpeedRuntime[] = {
    {"V01", "{\"enabled\": true, \"max_train_batch_size\": 100, \"micro_batch_sizes\": [2, 4, 6], \"version\": 0.1}", 1, 96, 6, 16},
    {"V01", "{\"enabled\": true, \"max_train_batch_size\": 100, \"micro_batch_sizes\": [2, 4, 6], \"version\": 0.1}", 2, 96, 6, 8},
    {"V01", "{\"enabled\": true, \"max_train_batch_size\": 100, \"micro_batch_sizes\": [2, 4, 6], \"version\": 0.1}", 4, 96, 6, 4},
    {"V02Default", "{\"enabled\": true, \"max_train_batch_size\": 2000, \"micro_batch_sizes\": [2, 4, 6]}", 1, 1680, 6, 280},
    {"V02Default", "{\"enabled\": true, \"max_train_batch_size\": 2000, \"micro_batch_sizes\": [2, 4, 6]}", 2, 1680, 6, 140},
    {"V02Default", "{\"enabled\": true, \"max_train_batch_size\": 2000, \"micro_batch_sizes\": [2, 4, 6]}", 4, 1680, 6, 70},
    {"V02TwoPerNode", "{\"enabled\": true, \"max_train_batch_size\": 512, \"micro_batch_sizes\": [8], \"num_gpus_per_node\": 2, \"min_gpus\": 2, \"max_gpus\": 8}", 1, 512, 8, 64},
    {"V02TwoPerNode", "{\"enabled\": true, \"max_train_batch_size\": 512, \"micro_batch_sizes\": [8], \"num_gpus_per_node\": 2, \"min_gpus\": 2, \"max_gpus\": 8}", 2, 384, 8, 24},
    {"V02TwoPerNode", "{\"enabled\": true, \"max_train_batch_size\": 512, \"micro_batch_sizes\": [8], \"num_gpus_per_node\": 2, \"min_gpus\": 2, \"max_gpus\": 8}", 4, 384, 8, 12},
};
// clang-format on

std::string with_block(const std::string& block, const std::string& rest = "") {
  return "{\"elasticity\": " + block + rest + "}";
}

TEST(ElasticityConfig, DecidesTheBatchTripleAtEachWorldSize) {
  for (const RuntimeRow& row : kDeepSpeedRuntime) {
    SCOPED_TRACE(std::string(row.name) + " at world size " + std::to_string(row.world_size));
    const Config c = parse_config(with_block(row.block), ConfigFormat::kJson, {}, row.world_size);
    EXPECT_EQ(c.train_batch_size, row.train_batch_size);
    EXPECT_EQ(c.train_micro_batch_size_per_gpu, row.micro_batch_size);
    EXPECT_EQ(c.gradient_accumulation_steps, row.gradient_accumulation_steps);
  }
}

constexpr const char* kBlock =
    R"({"enabled": true, "max_train_batch_size": 100, "micro_batch_sizes": [2, 4, 6],
        "version": 0.1})";

TEST(ElasticityConfig, WorldSizeNotValidIsOneLine) {
  // 96's valid counts at micro 2, 4 or 6 stop at 48; 5 divides none of 48, 24 or 16.
  const ConfigReport r = check_config(with_block(kBlock), ConfigFormat::kJson, {}, 5);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0],
            "elasticity: world size 5 is not one of the valid GPU counts [1, 2, 3, 4, 6, 8, 12, "
            "16, 24, 48]");
}

TEST(ElasticityConfig, BatchKeysBesideTheBlockAreOneError) {
  const ConfigReport r = check_config(
      with_block(kBlock, R"(, "train_batch_size": 16, "gradient_accumulation_steps": 2)"),
      ConfigFormat::kJson, {}, 2);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0],
            "elasticity: train_batch_size 16, gradient_accumulation_steps 2 given beside an "
            "enabled elasticity block, which decides the batch (train_batch_size 96, micro 6, "
            "accumulation 8 at world size 2); remove them, or set "
            "elasticity.ignore_non_elastic_batch_info: true to have them replaced");
}

TEST(ElasticityConfig, IgnoreNonElasticBatchInfoReplacesThem) {
  const std::string block =
      R"({"enabled": true, "max_train_batch_size": 100, "micro_batch_sizes": [2, 4, 6],
          "version": 0.1, "ignore_non_elastic_batch_info": true})";
  const ConfigReport r = check_config(with_block(block, R"(, "train_micro_batch_size_per_gpu": 4)"),
                                      ConfigFormat::kJson, {}, 4);
  ASSERT_TRUE(r.config) << r.errors[0];
  EXPECT_EQ(r.config->train_batch_size, 96);
  EXPECT_EQ(r.config->train_micro_batch_size_per_gpu, 6);
  EXPECT_EQ(r.config->gradient_accumulation_steps, 4);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0],
            "train_micro_batch_size_per_gpu: 4 replaced by the elastic 6 "
            "(elasticity.ignore_non_elastic_batch_info)");
}

// As DeepSpeed: an "auto" batch key is a batch key given, so it conflicts unless ignored; then
// elasticity fills it.
TEST(ElasticityConfig, AutoBatchKeysFollowDeepSpeedsRuntime) {
  const std::string autos =
      R"(, "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto")";
  ProgramValues program;
  program.micro_batch_size = 8;
  ConfigReport r = check_config(with_block(kBlock, autos), ConfigFormat::kJson, {}, 2, program);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].find("train_batch_size \"auto\", train_micro_batch_size_per_gpu \"auto\""),
            std::string::npos)
      << r.errors[0];
  r = check_config(with_block(kBlock, autos), ConfigFormat::kJson,
                   {"elasticity.ignore_non_elastic_batch_info=true"}, 2, program);
  ASSERT_TRUE(r.config) << r.errors[0];
  EXPECT_EQ(r.config->train_batch_size, 96);
  EXPECT_EQ(r.config->train_micro_batch_size_per_gpu, 6);
  EXPECT_EQ(r.config->gradient_accumulation_steps, 8);
  EXPECT_NE(std::find(r.autos.begin(), r.autos.end(),
                      "train_micro_batch_size_per_gpu = 6 (\"auto\": elasticity at world size 2)"),
            r.autos.end());
}

TEST(ElasticityConfig, DisabledLeavesTheBatchAlone) {
  const std::string block = R"({"enabled": false, "max_train_batch_size": 100,
                                "micro_batch_sizes": [2, 4, 6], "model_parallel_size": 2})";
  const ConfigReport r =
      check_config(with_block(block, R"(, "train_batch_size": 8)"), ConfigFormat::kJson, {}, 2);
  ASSERT_TRUE(r.config) << r.errors[0];
  EXPECT_EQ(r.config->train_batch_size, 8);
  EXPECT_EQ(r.config->train_micro_batch_size_per_gpu, 4);
  EXPECT_TRUE(r.warnings.empty());
  // Without a batch key it is the usual error.
  EXPECT_FALSE(check_config(with_block(block), ConfigFormat::kJson, {}, 2).config);
}

TEST(ElasticityConfig, ResolvedConfigLoadsAgain) {
  const Config a = parse_config(with_block(kBlock), ConfigFormat::kJson, {}, 4);
  const Config b = parse_config(a.to_json(), ConfigFormat::kJson, {}, 4);
  EXPECT_EQ(a, b);
  EXPECT_EQ(b.elasticity.micro_batch_sizes, (std::vector<int64_t>{2, 4, 6}));
  EXPECT_EQ(b.elasticity.version, 0.1);
  // The disabled default writes and reads back too.
  const Config d = parse_config("train_batch_size: 8", ConfigFormat::kYaml, {}, 1);
  EXPECT_EQ(parse_config(d.to_json(), ConfigFormat::kJson, {}, 1), d);
}

TEST(ElasticityConfig, StrictBlockAndWarnings) {
  ConfigReport r =
      check_config(with_block(R"({"enabled": true, "max_gpu": 4})"), ConfigFormat::kJson, {}, 1);
  ASSERT_FALSE(r.errors.empty());
  EXPECT_EQ(r.errors[0], "elasticity.max_gpu: unknown key; did you mean 'max_gpus'?");
  // DeepSpeed's key is prefer_larger_batch; it never reads this name, so neither does zerotorch.
  r = check_config(with_block(R"({"enabled": true, "max_train_batch_size": 100,
                                  "micro_batch_sizes": [2], "prefer_larger_batch_size": false})"),
                   ConfigFormat::kJson, {}, 2);
  ASSERT_TRUE(r.config) << r.errors[0];
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0].rfind("elasticity.prefer_larger_batch_size: no effect in zerotorch", 0),
            0u);
  r = check_config(with_block(R"({"enabled": true, "max_train_batch_size": 512,
                                  "micro_batch_sizes": [8], "num_gpus_per_node": 2,
                                  "model_parallel_size": 2, "min_time": 30})"),
                   ConfigFormat::kJson, {}, 2);
  ASSERT_TRUE(r.config) << r.errors[0];
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0].rfind("elasticity.model_parallel_size: zerotorch has no model", 0), 0u);
}

TEST(ElasticityConfig, BlockErrorsNameTheKey) {
  ConfigReport r = check_config(with_block(R"({"enabled": true, "micro_batch_sizes": [2]})"),
                                ConfigFormat::kJson, {}, 1);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0], "elasticity.max_train_batch_size: required when elasticity is enabled");
  r = check_config(with_block(R"({"enabled": true, "max_train_batch_size": 8,
                                  "micro_batch_sizes": [2, 2.5]})"),
                   ConfigFormat::kJson, {}, 1);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0], "elasticity.micro_batch_sizes[1]: expected an integer, got 2.5");
  // Version 0.2 at world size 3: no whole multiple of micro 4 * 3 ranks fits in 10.
  r = check_config(with_block(R"({"enabled": true, "max_train_batch_size": 10,
                                  "micro_batch_sizes": [4]})"),
                   ConfigFormat::kJson, {}, 3);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].rfind("train_batch_size: elasticity gives train_batch_size 0, micro 4, "
                              "accumulation 0 at world size 3",
                              0),
            0u)
      << r.errors[0];
}

}  // namespace
}  // namespace zt
