#include "core/profile/flop_counter.h"

#include <algorithm>
#include <array>

#include "base/error.h"

namespace zt::profile {
namespace {

thread_local int t_recompute_depth = 0;
// Counted ops open on this thread: an op nested in one is part of it, not counted again.
thread_local int t_counted_depth = 0;

// Marks an op that was counted, so its end callback closes it.
struct CountedOp : at::ObserverContext {};
thread_local std::vector<const torch::nn::Module*> t_scopes;

// The counters counting: read lock-free by every op's callback, written under g_registry.
std::array<std::atomic<FlopCounter*>, FlopCounter::kMaxCounting> g_counting{};
std::mutex g_registry;
int g_num_counting = 0;
at::CallbackHandle g_handle = 0;

}  // namespace

FlopCounter::~FlopCounter() {
  stop();
}

FlopCounter* FlopCounter::active() {
  for (auto& slot : g_counting) {
    if (FlopCounter* c = slot.load(std::memory_order_acquire)) return c;
  }
  return nullptr;
}

FlopCounter* FlopCounter::tracking_forward() {
  for (auto& slot : g_counting) {
    FlopCounter* c = slot.load(std::memory_order_acquire);
    if (c != nullptr && c->tracking() && c->phase() == Phase::kForward) return c;
  }
  return nullptr;
}

void FlopCounter::start() {
  if (counting()) return;
  std::lock_guard<std::mutex> lock(g_registry);
  auto free = std::find_if(g_counting.begin(), g_counting.end(),
                           [](const auto& slot) { return slot.load() == nullptr; });
  ZT_CHECK(free != g_counting.end(), "more than ", kMaxCounting,
           " FLOPs counters (flops_profiler engines) count at once in this process");
  if (g_num_counting++ == 0) {
    // Inputs are needed for the shapes; FUNCTION scope only, so autograd nodes (which wrap the
    // backward's ATen ops, themselves counted) are not seen.
    g_handle = at::addGlobalCallback(
        at::RecordFunctionCallback(&FlopCounter::on_op, &FlopCounter::on_op_end)
            .needsInputs(true)
            .scopes({at::RecordScope::FUNCTION}));
  }
  free->store(this, std::memory_order_release);
  counting_ = true;
}

void FlopCounter::stop() {
  if (!counting()) return;
  std::lock_guard<std::mutex> lock(g_registry);
  for (auto& slot : g_counting) {
    if (slot.load() == this) slot.store(nullptr, std::memory_order_release);
  }
  if (--g_num_counting == 0) at::removeCallback(g_handle);
  counting_ = false;
}

void FlopCounter::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  totals_ = FlopTotals{};
  modules_.clear();
}

void FlopCounter::track_modules(const torch::nn::Module* model) {
  std::lock_guard<std::mutex> lock(mutex_);
  model_ = model;
  owners_.clear();
  owners_stale_ = true;
  tracking_.store(model != nullptr, std::memory_order_relaxed);
}

FlopTotals FlopCounter::totals() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return totals_;
}

std::unordered_map<const torch::nn::Module*, ModuleFlops> FlopCounter::module_flops() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return modules_;
}

std::unique_ptr<at::ObserverContext> FlopCounter::on_op(const at::RecordFunction& fn) {
  if (t_counted_depth > 0) return nullptr;
  bool counted = false;
  for (auto& slot : g_counting) {
    FlopCounter* c = slot.load(std::memory_order_acquire);
    if (c != nullptr && c->add(fn)) counted = true;
  }
  if (!counted) return nullptr;
  ++t_counted_depth;
  return std::make_unique<CountedOp>();
}

void FlopCounter::on_op_end(const at::RecordFunction&, at::ObserverContext* ctx) {
  if (ctx != nullptr) --t_counted_depth;
}

bool FlopCounter::add(const at::RecordFunction& fn) {
  const Phase p = phase();
  const bool recompute = t_recompute_depth > 0;
  if (p == Phase::kIdle && !recompute) return false;
  const OpFlops f = op_flops(fn.name(), fn.inputs());
  if (!f.counted()) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  totals_.other += f.other;
  if (recompute) {
    totals_.recompute += f.matmul + f.recompute;
    return true;
  }
  totals_.recompute += f.recompute;
  (p == Phase::kForward ? totals_.forward : totals_.backward) += f.matmul;
  if (p != Phase::kForward || !tracking()) return true;
  const torch::nn::Module* m = owner_of(fn.inputs());
  if (m == nullptr) m = t_scopes.empty() ? model_ : t_scopes.back();
  ModuleFlops& mf = modules_[m];
  mf.matmul += f.matmul;
  mf.other += f.other;
  return true;
}

// Called with mutex_ held.
const torch::nn::Module* FlopCounter::owner_of(c10::ArrayRef<const c10::IValue> inputs) {
  auto find = [&]() -> const torch::nn::Module* {
    for (const c10::IValue& v : inputs) {
      if (!v.isTensor()) continue;
      const at::Tensor& t = v.toTensor();
      if (!t.defined() || !t.has_storage() || t.numel() == 0) continue;
      const auto it = owners_.find(t.const_data_ptr());
      if (it != owners_.end()) return it->second;
    }
    return nullptr;
  };
  if (owners_stale_ && model_ != nullptr) {
    owners_.clear();
    for (const auto& item : model_->named_modules()) {
      for (const auto& p : item.value()->named_parameters(/*recurse=*/false)) {
        const at::Tensor& t = p.value();
        if (t.defined() && t.has_storage() && t.numel() > 0) {
          owners_[t.const_data_ptr()] = item.value().get();
        }
      }
    }
    owners_stale_ = false;
  }
  return find();
}

void FlopCounter::add_scope_time(const torch::nn::Module* m, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ModuleFlops& mf = modules_[m];
  ++mf.calls;
  mf.seconds += seconds;
}

RecomputeScope::RecomputeScope() {
  ++t_recompute_depth;
}

RecomputeScope::~RecomputeScope() {
  --t_recompute_depth;
}

ModuleScope::ModuleScope(const torch::nn::Module& module) {
  if (t_recompute_depth > 0) return;
  FlopCounter* c = FlopCounter::tracking_forward();
  if (c == nullptr) return;
  counter_ = c;
  module_ = &module;
  {
    // A scope opens where parameters may just have been gathered (zt::call_unit): the
    // data-pointer map is rebuilt at the next lookup.
    std::lock_guard<std::mutex> lock(c->mutex_);
    c->owners_stale_ = true;
  }
  if (c->sync_ != nullptr) c->sync_();
  t_scopes.push_back(module_);
  start_ = std::chrono::steady_clock::now();
}

ModuleScope::~ModuleScope() {
  if (counter_ == nullptr) return;
  if (counter_->sync_ != nullptr) counter_->sync_();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  t_scopes.pop_back();
  counter_->add_scope_time(module_, s);
}

}  // namespace zt::profile
