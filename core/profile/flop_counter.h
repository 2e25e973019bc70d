#pragma once
// Counts the floating-point operations a process runs, op by op, as ATen executes them: while a
// FlopCounter is counting, a process-wide at::RecordFunction callback reads each op's name and
// input shapes and applies core/profile/op_flops.h. Ops of every thread are counted (the autograd
// engine's device threads run the backward on a GPU), by the phase the counter is in:
//
//   phase kForward / kBackward   set by whoever drives the step (the engine: core/engine.cpp)
//   phase kIdle                  ops are not counted (the optimizer step, gathers, the loader)
//   RecomputeScope               this thread's ops are recomputation, whatever the phase
//                                (activation checkpointing's second forward)
//
// Module attribution (with track_modules, for the FLOPs profiler's per-module tables; forward
// ops only, as DeepSpeed's profiler): an op reading a parameter is charged to the module that
// owns it (a Linear's matmul to the Linear, matched by the parameter's data pointer, which also
// finds stage-3 parameters while they are gathered); any other op to the innermost ModuleScope
// open on its thread (zt::call_unit opens one per unit, the engine one for the whole model), so
// a block's attention and activations are charged to the block.
//
// Nothing is registered while no counter counts: RecordFunction then costs ATen one check of an
// empty callback list per op, and ModuleScope a scan of kMaxCounting atomic pointers.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <ATen/record_function.h>
#include <torch/nn/module.h>

#include "core/profile/op_flops.h"

namespace zt::profile {

enum class Phase : int { kIdle = 0, kForward, kBackward };

// Flops of one stretch of counting.
struct FlopTotals {
  double forward = 0;    // model work of forward passes (matmul + attention)
  double backward = 0;   // model work of backward passes
  double recompute = 0;  // recomputed forwards and attention's recomputed scores
  double other = 0;      // elementwise and reductions, every phase
  // The flops model-FLOPs utilisation counts: matrix products and attention, each once.
  double model() const { return forward + backward; }
  // What the hardware ran: model work plus recomputation.
  double hardware() const { return forward + backward + recompute; }
};

// One module's forward, while tracking: flops charged to it directly (children not included),
// and for modules with a ModuleScope, calls and host seconds inside them (children included).
struct ModuleFlops {
  double matmul = 0, other = 0;
  int64_t calls = 0;
  double seconds = 0;
};

class FlopCounter {
 public:
  FlopCounter() = default;
  ~FlopCounter();
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;

  // Starts counting or stops; totals are kept until reset(). Up to kMaxCounting counters count
  // at once in a process (two engines, each profiling), each by its own phase; the callback is
  // registered while at least one counts.
  void start();
  void stop();
  bool counting() const { return counting_; }
  void reset();

  void set_phase(Phase p) { phase_.store(static_cast<int>(p), std::memory_order_relaxed); }
  Phase phase() const { return static_cast<Phase>(phase_.load(std::memory_order_relaxed)); }

  // Per-module attribution within `model` (its parameters and submodules), or off (null).
  void track_modules(const torch::nn::Module* model);
  // Called when a ModuleScope opens and closes while tracking (e.g. a device synchronize, so
  // that a scope's seconds are the device's time, not the host's queueing time); may be empty.
  void set_scope_sync(void (*sync)()) { sync_ = sync; }

  FlopTotals totals() const;
  // Keyed by module; only modules that were charged or scoped.
  std::unordered_map<const torch::nn::Module*, ModuleFlops> module_flops() const;

  static constexpr int kMaxCounting = 8;
  // The first counter counting now, or null.
  static FlopCounter* active();

 private:
  friend class ModuleScope;
  // The counter tracking modules in its forward phase, or null.
  static FlopCounter* tracking_forward();
  static std::unique_ptr<at::ObserverContext> on_op(const at::RecordFunction& fn);
  static void on_op_end(const at::RecordFunction& fn, at::ObserverContext* ctx);
  // Counts fn; false when it is not counted (idle phase, no formula).
  bool add(const at::RecordFunction& fn);
  const torch::nn::Module* owner_of(c10::ArrayRef<const c10::IValue> inputs);
  void add_scope_time(const torch::nn::Module* m, double seconds);
  bool tracking() const { return tracking_.load(std::memory_order_relaxed); }

  bool counting_ = false;
  std::atomic<int> phase_{0};
  std::atomic<bool> tracking_{false};
  void (*sync_)() = nullptr;
  bool owners_stale_ = true;
  mutable std::mutex mutex_;
  FlopTotals totals_;
  const torch::nn::Module* model_ = nullptr;
  // data pointer of each parameter -> the module holding it; rebuilt when a lookup misses,
  // since stage-3 parameters point into whatever buffer gathered them.
  std::unordered_map<const void*, const torch::nn::Module*> owners_;
  std::unordered_map<const torch::nn::Module*, ModuleFlops> modules_;
};

// This thread's ops inside are recomputation (see above).
class RecomputeScope {
 public:
  RecomputeScope();
  ~RecomputeScope();
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;
};

// This thread's ops inside belong to `module` unless they read a parameter of another module.
// Inert unless a counter tracks modules.
class ModuleScope {
 public:
  explicit ModuleScope(const torch::nn::Module& module);
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

 private:
  FlopCounter* counter_ = nullptr;
  const torch::nn::Module* module_ = nullptr;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace zt::profile
