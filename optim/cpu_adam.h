#pragma once
// CpuAdam: the ZeRO-Offload optimizer, in the spirit of DeepSpeed's DeepSpeedCPUAdam. One pass
// over memory per step: per element it reads param, grad, m, v (16 bytes) and writes param, m, v
// and, when asked, the fp16/bf16 copy of param (12 + 2 bytes), so a step moves 28-30 bytes per
// parameter and is bound by memory bandwidth. SIMD (AVX-512 or AVX2 chosen at run time, portable
// fallback), multi-threaded over tiles of OptimizerSpec::tile elements with LibTorch's intra-op
// pool (at::parallel_for, so at::set_num_threads governs it).
//
// Semantics: torch::optim::Adam (adamw_mode false) or AdamW (true), computed in fp32 by
// adam_formula.h's update, shared with Adam8bit and the CUDA kernels (the scalar path rounds it
// unfused, AVX2/AVX-512 fused, as FusedAdam's kernel). State, CPU fp32, laid out like master:
//   "exp_avg", "exp_avg_sq" (as Adam's, so a checkpoint moves between Adam and CpuAdam).

#include "optim/cpu_adam_kernel.h"
#include "optim/shard_optimizer.h"

namespace zt::optim {

enum class SimdPath { kScalar, kAvx2, kAvx512 };

const char* simd_path_name(SimdPath path);
// Whether this CPU can run the path (the scalar path always can).
bool simd_path_supported(SimdPath path);
// The best supported path.
SimdPath best_simd_path();
// "auto" (best_simd_path, or ZT_CPU_ADAM_SIMD when set), "avx512", "avx2", "scalar"; an unknown
// name or a path the CPU lacks is a zt::Error naming it.
SimdPath parse_simd_path(const std::string& name);

// Environment variable that overrides simd = "auto" (tests and benchmarks force a path with it).
inline constexpr const char* kCpuAdamSimdEnv = "ZT_CPU_ADAM_SIMD";

class CpuAdam : public ShardOptimizer {
 public:
  explicit CpuAdam(const OptimizerSpec& spec);

  void step(at::Tensor& master, const at::Tensor& grad, const std::vector<GroupRange>& groups,
            at::Tensor* half_out = nullptr) override;
  void init(int64_t numel, const at::TensorOptions& options) override;
  int64_t state_bytes() const override;
  std::map<std::string, at::Tensor> state_dict() const override;
  void load_state_dict(const std::map<std::string, at::Tensor>& state) override;
  std::string name() const override { return "CpuAdam"; }
  // exp_avg and exp_avg_sq (CPU fp32, contiguous, one numel) are updated in place by the next
  // steps: NVMe offload's chunk views (core/zero/nvme_optimizer.h). load_state_dict or init
  // replaces them. Always true.
  bool adopt_state(const std::map<std::string, at::Tensor>& state) override;

  SimdPath simd_path() const { return path_; }

 private:
  bool adamw_mode_;
  int64_t tile_;
  SimdPath path_;
  void (*kernel_)(const kernels::AdamArgs&);
  at::Tensor exp_avg_;     // flat fp32 CPU, numel of master
  at::Tensor exp_avg_sq_;  // flat fp32 CPU, numel of master
};

}  // namespace zt::optim
