// zt-gpu-bench: trains GPT-2 124M (12 layers, 12 heads, d 768, vocab 50257, context 1024; the
// GPT example's model, models/gpt) on random tokens on one GPU through zt::Engine with the
// nccl backend, and reports tokens/s, model FLOPs utilisation and peak memory as one JSON line.
//
//   zt-gpu-bench --dtype bf16 --stage 3 [--offload] [--offload-param cpu|nvme] [--batch 16]
//                [--seq 1024] [--steps 10] [--warmup 3] [--peak-tflops 989]
//                [--loss-tile N] [--unfused-loss] [--no-overflow-check] [--breakdown]
//                [--comm-timeout-s 60] [--json FILE]
//
// --loss-tile N: the head and the loss N positions at a time (the model's loss_tile_tokens,
// models/tiled_loss.h), so that the logits are never held whole.
// --unfused-loss: the loss through LibTorch's ops (logits widened to fp32, log-softmax, NLL)
// instead of the fused cross-entropy kernel (core/ops/cross_entropy.h), to time the kernel's gain.
// --no-overflow-check: bf16.check_grad_overflow false (no step skipped for inf/NaN gradients, as
// DeepSpeed at stages 1-2); with --offload at stage 1 or 2 each bucket's host optimizer step then
// runs during backward, as its gradient arrives (ShardedStep::steps_at_reduction).
// --breakdown: wall_clock_breakdown every step (steps_per_print 1): one line a step on stderr with
// the device's forward / backward / step times (core/profile/phase_timer.h). Reading the events
// waits for each step's end, so the host cannot run ahead into the next step: the row is a little
// slower for it.
//
// --offload-param (stage 3): the 16-bit shards in pinned host memory (cpu) or in files under the
// system's temp directory (nvme, every shard: max_in_cpu 0), copied to the GPU per unit.
//
// --comm-timeout-s bounds NCCL initialisation and every collective (the library default is 30
// minutes): bench/gpu_check.sh must see a hung run fail inside its window, not at its time limit.
//
// A run whose loss is non-finite at any step, or that took no optimizer step (all of them skipped
// by the fp16 loss scaler), fails: its row is still printed, with "ok":false and the reason in
// "error", then the reason goes to stderr as one line and the exit status is 1.
//
// MFU = 6 * parameters * tokens / seconds / peak. 6N per token counts the matmuls of forward and
// backward against every parameter (embeddings included, attention scores excluded: the usual
// convention, which understates the work a little). The default peak is the H100/H200 SXM dense
// bf16 figure, 989 TFLOPS; fp16's is the same.
// Timing: the steps after warmup, between two device synchronisations; peak memory: the CUDA
// caching allocator's peak of allocated bytes over the whole run (as
// torch.cuda.max_memory_allocated).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "base/error.h"
#include "base/main_guard.h"
#include "core/engine.h"
#include "core/ops/cross_entropy.h"
#include "models/gpt/gpt_model.h"
#include "parallel/dist.h"

namespace {

struct Args {
  std::string dtype = "bf16";
  int stage = 0;
  bool offload = false;
  std::string offload_param;  // "", "cpu" or "nvme"
  int64_t batch = 16;
  int64_t seq = 1024;
  int steps = 10;
  int warmup = 3;
  double peak_tflops = 989.0;
  int comm_timeout_s = 60;
  int64_t loss_tile = 0;
  bool unfused_loss = false;
  bool no_overflow_check = false;
  bool breakdown = false;
  std::string json;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto value = [&]() -> std::string {
      ZT_CHECK(i + 1 < argc, "zt-gpu-bench: ", k, " needs a value");
      return argv[++i];
    };
    if (k == "--dtype")
      a.dtype = value();
    else if (k == "--stage")
      a.stage = std::stoi(value());
    else if (k == "--offload")
      a.offload = true;
    else if (k == "--offload-param")
      a.offload_param = value();
    else if (k == "--batch")
      a.batch = std::stoll(value());
    else if (k == "--seq")
      a.seq = std::stoll(value());
    else if (k == "--steps")
      a.steps = std::stoi(value());
    else if (k == "--warmup")
      a.warmup = std::stoi(value());
    else if (k == "--peak-tflops")
      a.peak_tflops = std::stod(value());
    else if (k == "--comm-timeout-s")
      a.comm_timeout_s = std::stoi(value());
    else if (k == "--breakdown")
      a.breakdown = true;
    else if (k == "--unfused-loss")
      a.unfused_loss = true;
    else if (k == "--no-overflow-check")
      a.no_overflow_check = true;
    else if (k == "--loss-tile")
      a.loss_tile = std::stoll(value());
    else if (k == "--json")
      a.json = value();
    else
      ZT_THROW("zt-gpu-bench: unknown argument ", k);
  }
  ZT_CHECK(a.dtype == "bf16" || a.dtype == "fp16" || a.dtype == "fp32",
           "--dtype must be bf16, fp16 or fp32, got ", a.dtype);
  ZT_CHECK(a.offload_param.empty() || a.offload_param == "cpu" || a.offload_param == "nvme",
           "--offload-param must be cpu or nvme, got ", a.offload_param);
  ZT_CHECK(a.offload_param.empty() || a.stage == 3, "--offload-param needs --stage 3");
  ZT_CHECK(a.steps >= 1 && a.warmup >= 1, "--steps and --warmup must be >= 1");
  ZT_CHECK(a.loss_tile >= 0, "--loss-tile must be >= 0, got ", a.loss_tile);
  ZT_CHECK(a.comm_timeout_s >= 1, "--comm-timeout-s must be >= 1, got ", a.comm_timeout_s);
  return a;
}

int run(int argc, char** argv) {
  const Args a = parse(argc, argv);
  ZT_CHECK(torch::cuda::is_available(), "zt-gpu-bench needs a CUDA device");
  zt::ops::set_fused_kernels(!a.unfused_loss);
  const torch::Device gpu(torch::kCUDA, 0);
  zt::models::GptShape shape;
  shape.n_layer = 12;
  shape.n_head = 12;
  shape.d_model = 768;
  shape.vocab_size = 50257;
  shape.max_seq_len = 1024;
  shape.loss_tile_tokens = a.loss_tile;
  ZT_CHECK(a.seq <= shape.max_seq_len, "--seq must be <= ", shape.max_seq_len);
  torch::manual_seed(0);
  zt::models::Gpt model(shape);
  const int64_t params = model->num_parameters();
  model->to(gpu);

  zt::EngineOptions o;
  zt::read_environment_switches(o);
  o.stage = a.stage;
  o.stage3_param_persistence_threshold = 0;  // stage 3 shards every buffer, as FSDP2
  o.offload_optimizer.device = a.offload ? zt::OffloadDevice::kCpu : zt::OffloadDevice::kNone;
  o.compute_dtype = a.dtype == "bf16" ? at::kBFloat16 : a.dtype == "fp16" ? at::kHalf : at::kFloat;
  o.optimizer.type =
      a.offload ? zt::optim::OptimizerKind::kCpuAdam : zt::optim::OptimizerKind::kAdamW;
  if (!a.offload_param.empty()) {
    o.offload_param.device =
        a.offload_param == "cpu" ? zt::OffloadDevice::kCpu : zt::OffloadDevice::kNvme;
    o.offload_param.pin_memory = true;
    o.offload_param.nvme_path = std::filesystem::temp_directory_path().string();
    o.offload_param.max_in_cpu = 0;
  }
  o.hyper.lr = 3e-4;
  o.hyper.weight_decay = 0.1;
  o.hyper.beta2 = 0.95;
  o.param_groups.no_decay_patterns = {"bias", "ln"};
  o.units = model->unit_names();
  o.wall_clock_breakdown = a.breakdown;
  o.bf16_check_grad_overflow = !a.no_overflow_check;
  if (a.breakdown) o.steps_per_print = 1;
  o.fp16.initial_scale_power = 16;
  zt::dist::CommOptions co;
  co.backend = zt::dist::Backend::kNccl;
  co.cuda = true;
  co.timeout = std::chrono::seconds(a.comm_timeout_s);
  zt::Engine engine(model.ptr(), o, zt::dist::create_communicator(co));

  // Random tokens (fixed per step): the benchmark measures the step, not data loading.
  torch::Tensor tokens = torch::randint(0, shape.vocab_size, {a.batch, a.seq + 1},
                                        torch::TensorOptions().dtype(torch::kLong).device(gpu));
  torch::Tensor input = tokens.narrow(1, 0, a.seq), labels = tokens.narrow(1, 1, a.seq);
  // Non-finite losses are counted on the device, so the timed steps keep no host synchronisation.
  torch::Tensor nonfinite = torch::zeros({}, torch::TensorOptions().dtype(torch::kInt).device(gpu));
  auto step = [&]() {
    torch::Tensor loss =
        engine.forward([&] { return model->causal_lm_loss(input, torch::Tensor(), labels); });
    engine.backward(loss);
    engine.step();
    nonfinite.add_(torch::isfinite(loss.detach()).logical_not().to(torch::kInt));
    return loss;
  };
  c10::cuda::CUDACachingAllocator::resetPeakStats(0);
  for (int i = 0; i < a.warmup; ++i) step();
  torch::cuda::synchronize();
  const auto start = std::chrono::steady_clock::now();
  torch::Tensor loss;
  for (int i = 0; i < a.steps; ++i) loss = step();
  torch::cuda::synchronize();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  const int64_t peak = stats.allocated_bytes[0].peak;

  // A run that diverged or never stepped the optimizer (every step skipped by the fp16 loss
  // scaler) measures nothing worth a row: it still prints one, marked failed, and exits 1.
  const int64_t bad_losses = nonfinite.item<int64_t>();
  const int64_t optimizer_steps = engine.global_step() - engine.skipped_steps();
  const double final_loss = loss.item<double>();
  std::string error;
  if (bad_losses > 0) {
    error = std::to_string(bad_losses) + " of " + std::to_string(a.warmup + a.steps) +
            " steps had a non-finite loss";
  } else if (optimizer_steps <= 0) {
    error = "no optimizer step taken (" + std::to_string(engine.skipped_steps()) + " of " +
            std::to_string(engine.global_step()) + " skipped for inf/NaN gradients)";
  }

  const double tokens_per_s = static_cast<double>(a.batch * a.seq * a.steps) / seconds;
  const double mfu = 6.0 * static_cast<double>(params) * tokens_per_s / (a.peak_tflops * 1e12);
  const std::string name = "zt " + a.dtype + " stage " + std::to_string(a.stage) +
                           (a.offload ? " + offload" : "") +
                           (a.offload_param.empty() ? "" : " + param " + a.offload_param) +
                           (a.loss_tile > 0 ? " + loss tile " + std::to_string(a.loss_tile) : "") +
                           (a.unfused_loss ? " + unfused loss" : "") +
                           (a.no_overflow_check ? " + no overflow check" : "");
  // JSON has no NaN: a non-finite loss is written as null.
  char loss_text[32] = "null";
  if (std::isfinite(final_loss)) std::snprintf(loss_text, sizeof loss_text, "%.4f", final_loss);
  char line[1536];
  std::snprintf(line, sizeof line,
                "{\"name\":\"%s\",\"impl\":\"zerotorch\",\"dtype\":\"%s\",\"stage\":%d,"
                "\"offload\":%s,\"loss_tile\":%lld,\"fused_loss\":%s,\"overflow_check\":%s,"
                "\"params\":%lld,\"batch\":%"
                "lld,\"seq\":%lld,\"steps\":%d,"
                "\"step_s\":%.6f,\"tokens_per_s\":%.1f,\"mfu\":%.4f,\"peak_tflops\":%.1f,"
                "\"peak_mem_bytes\":%lld,\"final_loss\":%s,\"skipped_steps\":%lld,"
                "\"optimizer_steps\":%lld,\"comm_wait_s\":%.4f,\"ok\":%s,\"error\":\"%s\"}",
                name.c_str(), a.dtype.c_str(), a.stage, a.offload ? "true" : "false",
                static_cast<long long>(a.loss_tile), a.unfused_loss ? "false" : "true",
                a.no_overflow_check ? "false" : "true", static_cast<long long>(params),
                static_cast<long long>(a.batch), static_cast<long long>(a.seq), a.steps,
                seconds / a.steps, tokens_per_s, mfu, a.peak_tflops, static_cast<long long>(peak),
                loss_text, static_cast<long long>(engine.skipped_steps()),
                static_cast<long long>(optimizer_steps), engine.comm_wait_seconds(),
                error.empty() ? "true" : "false", error.c_str());
  std::printf("%s\n", line);
  if (!a.json.empty()) {
    std::ofstream(a.json, std::ios::app) << line << "\n";
  }
  if (!error.empty()) {
    std::fprintf(stderr, "zt-gpu-bench: %s: %s\n", name.c_str(), error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_main("zt-gpu-bench", [&] { return run(argc, argv); });
}
