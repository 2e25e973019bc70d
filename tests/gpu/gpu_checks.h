#pragma once
// The GPU checks: each compares a CUDA code path with its CPU reference (or a closed form) and
// throws one zt::Error naming what differs; a check made of cases runs all of them and names
// every failing one in that error. Two drivers run them: the GoogleTest suite
// gpu_checks_test.cpp (ctest -L gpu; every case skips with the reason when no GPU is usable) and
// zt-gpu-checks (gpu_checks_main.cpp), which bench/gpu_check.sh runs, one process per check, on
// machines without GTest.
//
//   nccl_one_rank          the nccl backend, one rank: every collective and dtype, stream order
//   fused_adam             optim/fused_adam.cu vs CpuAdam (bit for bit with its AVX2/AVX-512
//                          build; groups with gaps, bf16 copy, untouched gaps)
//   adam8bit               optim/adam8bit.cu vs Adam8bit's CPU pass (codes, absmax, params)
//   engine_equivalence     zt::Engine on CUDA (nccl, stages 0-3, optimizer offload cpu, stage-3
//                          persistence threshold 100000) vs torch::optim::AdamW
//   engine_param_offload   stage 3 with offload_param cpu/nvme, with and without optimizer
//                          offload, and with the persistence threshold: fp32 vs AdamW, bf16 vs
//                          the bf16 engine without offload
//   engine_nvme_optimizer  offload_optimizer nvme at stages 2 and 3 (also with offload_param
//                          nvme) vs AdamW
//   engine_half            zt::Engine on CUDA in bf16 and fp16 (loss scaling): trains, stays finite

#include <functional>
#include <string>
#include <vector>

namespace zt::gpu_checks {

struct Check {
  std::string name;
  std::function<void()> run;  // throws zt::Error on a mismatch
};

// Why the checks cannot run here ("" when the CUDA plugin loads and sees a GPU).
std::string cuda_unavailable();
// Every check, in the order the drivers run them; building the list needs no GPU.
const std::vector<Check>& all_checks();

}  // namespace zt::gpu_checks
