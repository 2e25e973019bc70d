#pragma once
// The GPU checks: each compares a CUDA code path with its CPU reference (or a closed form) and
// throws one zt::Error naming what differs; a check made of cases runs all of them and names
// every failing one in that error. Two drivers run them: the GoogleTest suite
// gpu_checks_test.cpp (ctest -L gpu; every case skips with the reason when no GPU is usable) and
// zt-gpu-checks (gpu_checks_main.cpp), which bench/gpu_check.sh runs, one process per check, on
// machines without GTest.
//
// They run on cuda:0, or on another accelerator a driver chose with set_device (the host-backed
// test device, testdevice/test_device.h, whose library the driver loaded): there the same
// placement, copy and stream branches run against the same references, but with the device's
// collectives (gloo or MPI behind a StagingCommunicator) and without the CUDA kernels, so the
// checks of CUDA kernels (cuda_kernels) are skipped.
//
//   nccl_one_rank          the device's backend (nccl on CUDA), one rank: every collective and
//                          dtype, stream order
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
//   engine_half            zt::Engine on CUDA in bf16 and fp16 (loss scaling): trains, stays
//   finite;
//                          bf16 stage 2 offload with the host steps at reduction
//                          (check_grad_overflow false) bit for bit as with them in the step
//   fused_cross_entropy    core/ops/cross_entropy.cu vs LibTorch's cross-entropy in float64
//                          (fp32/fp16/bf16 logits, ignored rows, -inf and large logits, a vocab
//                          of 50257, 7 and 1): mean and sum losses, the gradient

#include <functional>
#include <string>
#include <vector>

#include <c10/core/Device.h>

namespace zt::gpu_checks {

struct Check {
  std::string name;
  std::function<void()> run;  // throws zt::Error on a mismatch
  bool cuda_kernels = false;  // checks a CUDA kernel: runs on CUDA only
};

// The device the checks run on (cuda:0 unless set); set it before the first check runs.
void set_device(const c10::Device& device);
const c10::Device& device();

// Why the checks cannot run on device() ("" when they can: for CUDA, when the plugin loads and
// sees a GPU).
std::string device_unavailable();
// Every check, in the order the drivers run them; building the list needs no GPU.
const std::vector<Check>& all_checks();

}  // namespace zt::gpu_checks
