#pragma once
// DeepSpeed's flops_profiler, driven by the engine (core/engine.cpp), plus per-step throughput.
//
// While enabled, a FlopCounter (core/profile/flop_counter.h) counts every forward and backward,
// so each optimizer step reports this rank's model FLOPs (matrix products and attention, each
// counted once: recomputation excluded), achieved TFLOP/s over the step's wall time, and MFU
// against the device's peak (core/profile/device_peak.h, or peak_tflops). The training loop
// writes them to the log and the monitors (train/training_run.cpp).
//
// At global step profile_step (optimizer steps completed when the forward starts, 0-based as in
// DeepSpeed, so the default 1 is the second step), rank 0 tracks the first micro-batch's forward
// module by module and prints DeepSpeed's report when that step ends, to output_file or the log:
// the summary (params, MACs, forward and backward flops and latencies, FLOPS, MFU), the top
// top_modules module classes by params, MACs and latency at each depth up to module_depth (-1:
// every depth), and with `detailed` the module tree with each module's share.
//
// Where zerotorch differs from DeepSpeed: the backward is counted, not estimated as 2x the
// forward (recompute_fwd_factor is therefore not needed; activation checkpointing's recompute is
// counted apart); counts come from the ATen ops that ran, so they include functional calls
// (attention, activations) DeepSpeed's module hooks would have to patch; a module's latency is
// known for the modules the step opens a scope for (the model and its zt::call_unit units).

#include <chrono>
#include <cstdint>
#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <torch/nn/module.h>

#include "core/profile/flop_counter.h"
#include "core/profile/flops_profiler_options.h"

namespace zt::profile {

// One optimizer step on this rank.
struct StepFlops {
  int64_t step = 0;  // optimizer steps completed, this one included
  FlopTotals flops;
  double seconds = 0;      // wall time since the previous step ended (or the first forward)
  double peak_tflops = 0;  // 0: unknown, mfu() is then 0
  double tflops() const { return seconds > 0 ? flops.model() / seconds / 1e12 : 0; }
  double mfu() const { return peak_tflops > 0 ? tflops() / peak_tflops : 0; }
};

// What the report prints about the run besides counts.
struct ProfileContext {
  int rank = 0;
  int world_size = 1;
  int64_t gradient_accumulation_steps = 1;
  c10::Device device = c10::Device(c10::kCPU);
  at::ScalarType dtype = at::kFloat;
};

class FlopsProfiler {
 public:
  FlopsProfiler(FlopsProfilerOptions options, const torch::nn::Module& model, ProfileContext ctx);

  // The engine's calls; `global_step` = optimizer steps completed so far.
  void begin_forward(int64_t global_step);
  void end_forward();
  void begin_backward();
  void end_backward();
  // After the optimizer step that completed step `global_step` (1-based count).
  void end_step(int64_t global_step, double step_seconds);

  // The last completed step (step 0 before the first).
  const StepFlops& last() const { return last_; }
  double peak_tflops() const { return peak_; }

 private:
  void print_profile(int64_t step) const;

  FlopsProfilerOptions options_;
  const torch::nn::Module& model_;
  ProfileContext ctx_;
  double peak_;
  FlopCounter counter_;
  bool window_started_ = false;
  std::chrono::steady_clock::time_point window_start_, phase_start_;
  // The profiled micro-batch: its forward (tracked) and backward.
  enum class Profiling { kNo, kForward, kBackward, kDone } profiling_ = Profiling::kNo;
  FlopTotals before_profile_, profile_forward_, profile_backward_;
  double profile_fwd_seconds_ = 0, profile_bwd_seconds_ = 0, profile_step_seconds_ = 0;
  std::unordered_map<const torch::nn::Module*, ModuleFlops> profile_modules_;
  StepFlops last_;
};

}  // namespace zt::profile
