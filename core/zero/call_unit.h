#pragma once
// Stage-3 units in model code. C++ modules have no forward hooks, so a model marks the calls of
// its units (the submodules whose parameters are gathered together, e.g. transformer blocks):
//
//   for (auto& block : blocks_) x = zt::call_unit(*block, x);   // instead of block->forward(x)
//
// Outside an engine, or when the engine does not shard parameters, call_unit is exactly
// module.forward(args...). Under a stage-3 engine that declared the module as a unit, it gathers
// the unit's parameters before the call (and prefetches the next unit), releases them after it,
// and arranges for them to be gathered again just before the unit's backward. A Python module's
// units get the same two calls from forward hooks (python/csrc/engine_bindings.cpp).
//
// A routed unit (a module that is also a zt::RoutedUnit: a layer's experts, whose parameters all
// have the experts along their first dimension) is called through call_routed_unit once its
// routing is known, with the rows each of its experts takes on this rank; a stage-3 engine
// gathers only the experts that some rank of their ZeRO group routed rows to. Such a unit may
// sit inside another (the decoder layer that routes): it takes its own parameters out of it.

#include <mutex>
#include <unordered_map>

#include <ATen/core/ATen_fwd.h>
#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "core/profile/flop_counter.h"

namespace zt {

// Implemented by the engine for every unit it manages.
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void before_forward() = 0;
  // May register gradient hooks on the outputs (which must be returned as they are); undefined
  // tensors and tensors without a gradient are skipped.
  virtual void after_forward(at::TensorList outputs) = 0;
  // A routed unit's before_forward: rows (E,) int64, the rows each of its E experts takes on this
  // rank (on any device). Collective over the unit's ZeRO group.
  virtual void before_routed_forward(const at::Tensor& rows) {
    (void)rows;
    before_forward();
  }
};

// Marks a module whose calls go through call_routed_unit (see the top of the file).
class RoutedUnit {
 public:
  virtual ~RoutedUnit() = default;
};

// Process-wide map from a module to the hooks of the engine that owns it.
class UnitRegistry {
 public:
  static UnitRegistry& instance();
  void add(const torch::nn::Module* module, UnitHooks* hooks);
  void remove(const torch::nn::Module* module);
  UnitHooks* find(const torch::nn::Module* module) const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<const torch::nn::Module*, UnitHooks*> hooks_;
};

template <typename ModuleImpl, typename... Args>
at::Tensor call_unit(ModuleImpl& module, Args&&... args) {
  // The FLOPs profiler charges the unit's parameterless ops (attention, activations) to it.
  profile::ModuleScope scope(module);
  UnitHooks* hooks = UnitRegistry::instance().find(&module);
  if (hooks == nullptr) return module.forward(std::forward<Args>(args)...);
  hooks->before_forward();
  at::Tensor out = module.forward(std::forward<Args>(args)...);
  hooks->after_forward({out});
  return out;
}

// call_unit for code that uses a unit's parameters other than through its forward (a tiled loss
// over a head's weight, models/tiled_loss.h): fn() runs with them gathered, and they are gathered
// again before the backward of what it returns.
template <typename Fn>
at::Tensor call_unit_with(torch::nn::Module& module, Fn&& fn) {
  profile::ModuleScope scope(module);
  UnitHooks* hooks = UnitRegistry::instance().find(&module);
  if (hooks == nullptr) return fn();
  hooks->before_forward();
  at::Tensor out = fn();
  hooks->after_forward({out});
  return out;
}

// call_unit_with for a routed unit: fn() runs with the experts that `rows` (or another rank of
// the unit's ZeRO group) routed to gathered; the others' values must not be read (an expert over
// no rows reads none).
template <typename Fn>
at::Tensor call_routed_unit(torch::nn::Module& module, const at::Tensor& rows, Fn&& fn) {
  profile::ModuleScope scope(module);
  UnitHooks* hooks = UnitRegistry::instance().find(&module);
  if (hooks == nullptr) return fn();
  hooks->before_routed_forward(rows);
  at::Tensor out = fn();
  hooks->after_forward({out});
  return out;
}

}  // namespace zt
