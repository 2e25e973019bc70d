// core/config/memory_estimate.h against docs/DESIGN.md's formulas, computed by hand, and
// zt-config validate --params as users run it.

#include "core/config/memory_estimate.h"

#include <gtest/gtest.h>

namespace zt {
namespace {

Config with(const std::string& yaml) {
  return parse_config("train_batch_size: 8\n" + yaml, ConfigFormat::kYaml, {}, 2);
}

// A 686M-parameter GPT: stage 3, bf16, 2 ranks: 18 bytes per parameter / N in memory; with NVMe
// offload 12 of them move to disk and the host keeps buffer_count chunk buffers.
TEST(MemoryEstimate, Stage3Bf16MatchesTheTablePerOffloadChoice) {
  const int64_t psi = 686'000'000;
  Config c = with(
      "bf16: {enabled: true}\noptimizer: {type: AdamW}\n"
      "zero_optimization: {stage: 3, sub_group_size: 1e7, offload_optimizer: {device: nvme, "
      "nvme_path: /x, buffer_count: 4}}");
  const auto e = estimate_model_states(c, psi, 2);
  ASSERT_EQ(e.size(), 9u);  // offload_param {none, cpu, nvme} x offload_optimizer {none, cpu, nvme}
  const int64_t half = psi / 2;
  EXPECT_EQ(e[0].device_bytes, (2 + 4 + 12) * half);  // no offload: 18 Ψ / N
  EXPECT_EQ(e[0].host_bytes + e[0].nvme_bytes, 0);
  EXPECT_EQ(e[1].device_bytes, (2 + 4) * half);  // cpu: 12 Ψ / N in host memory
  EXPECT_EQ(e[1].host_bytes, 12 * half);
  EXPECT_EQ(e[2].device_bytes, (2 + 4) * half);  // nvme: 12 Ψ / N on disk
  EXPECT_EQ(e[2].nvme_bytes, 12 * half);
  EXPECT_EQ(e[2].host_bytes, 4 * 12 * 10'000'000);  // 4 buffers of one 1e7-element chunk
  // offload_param cpu: the 2 Ψ / N of shards move to host memory.
  EXPECT_EQ(e[5].device_bytes, 4 * half);
  EXPECT_EQ(e[5].host_bytes, 2 * half + 4 * 12 * 10'000'000);
  // offload_param nvme (defaults: max_in_cpu 1e9 keeps all 343M shard elements in host memory).
  EXPECT_EQ(e[8].nvme_bytes, 12 * half);
  EXPECT_EQ(e[8].host_bytes, 2 * half + 4 * 12 * 10'000'000);
  const auto lines = memory_estimate_lines(c, psi, 2);
  ASSERT_EQ(lines.size(), 10u);
  EXPECT_NE(lines[3].find("offload_param none, offload_optimizer nvme"), std::string::npos)
      << lines[3];
  EXPECT_NE(lines[3].find("<- this config"), std::string::npos) << lines[3];
  EXPECT_EQ(lines[1].find("<- this config"), std::string::npos) << lines[1];
}

// Hybrid sharding at 8 ranks in groups of 2: every rank holds what plain stage 3 over 2 ranks
// holds (18 bytes per parameter / 2 in bf16), and the header says so.
TEST(MemoryEstimate, HybridShardingShardsOverItsGroup) {
  const int64_t psi = 686'000'000;
  Config c = parse_config(
      "train_batch_size: 8\nbf16: {enabled: true}\noptimizer: {type: AdamW}\n"
      "zero_optimization: {stage: 3, mics_shard_size: 2}",
      ConfigFormat::kYaml, {}, 8);
  const auto e = estimate_model_states(c, psi, 8);
  EXPECT_EQ(e[0].device_bytes, (2 + 4 + 12) * (psi / 2));
  EXPECT_NE(memory_estimate_lines(c, psi, 8)[0].find("stage 3 sharded in groups of 2"),
            std::string::npos);
}

// ZeRO-Infinity for the 2B target: every shard on NVMe (max_in_cpu 0) leaves only the fp32
// gradients (4 Ψ / N) and the swap buffers in memory.
TEST(MemoryEstimate, Stage3ParametersOnNvmePastMaxInCpu) {
  const int64_t psi = 2'000'000'000;
  Config c = with(
      "bf16: {enabled: true}\noptimizer: {type: AdamW}\n"
      "zero_optimization: {stage: 3, sub_group_size: 1e8, offload_optimizer: {device: nvme, "
      "nvme_path: /x, buffer_count: 3}, offload_param: {device: nvme, nvme_path: /x, "
      "buffer_count: 4, buffer_size: 5e7, max_in_cpu: 1e8}}");
  const auto e = estimate_model_states(c, psi, 2);
  ASSERT_EQ(e.size(), 9u);
  const int64_t half = psi / 2;
  const MemoryEstimate& all = e[8];  // params nvme, optimizer nvme
  EXPECT_EQ(all.device_bytes, 4 * half);
  EXPECT_EQ(all.nvme_bytes, 12 * half + 2 * (half - 100'000'000));
  EXPECT_EQ(all.host_bytes, int64_t{3} * 12 * 100'000'000 + 2 * 100'000'000 + 4 * 2 * 50'000'000);
  const auto lines = memory_estimate_lines(c, psi, 2);
  EXPECT_NE(lines[9].find("offload_param nvme, offload_optimizer nvme"), std::string::npos)
      << lines[9];
  EXPECT_NE(lines[9].find("<- this config"), std::string::npos) << lines[9];
}

// fp32 without offload: the parameters are the master (K = 8); stages 0-2 keep full parameters,
// stage 1 full gradients, stage 0 the whole optimizer.
TEST(MemoryEstimate, Fp32StagesZeroToTwo) {
  const int64_t psi = 1000;
  const auto s0 = estimate_model_states(with("zero_optimization: {stage: 0}"), psi, 2);
  EXPECT_EQ(s0[0].device_bytes, (4 + 4 + 8) * psi);
  const auto s1 = estimate_model_states(with("zero_optimization: {stage: 1}"), psi, 2);
  EXPECT_EQ(s1[0].device_bytes, (4 + 4) * psi + 8 * psi / 2);
  EXPECT_EQ(s1[1].host_bytes, 12 * psi / 2);  // offload separates the master
  const auto s2 = estimate_model_states(with("zero_optimization: {stage: 2}"), psi, 2);
  EXPECT_EQ(s2[0].device_bytes, 4 * psi + (4 + 8) * psi / 2);
  const auto sgd = estimate_model_states(
      with("optimizer: {type: SGD, params: {momentum: 0.9}}\nzero_optimization: {stage: 2}"), psi,
      2);
  EXPECT_EQ(sgd[0].device_bytes, 4 * psi + (4 + 4) * psi / 2);
}

}  // namespace
}  // namespace zt
