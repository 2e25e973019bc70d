#pragma once
// Stage-3 units: which parameters are gathered together (the buckets cut from them are
// core/zero/unit_buckets.h).
//
// A unit is a submodule whose parameters are gathered together (a transformer block), declared by
// name and called through zt::call_unit (core/zero/call_unit.h). Trainable parameters outside
// every declared unit form the root unit, last in the list, gathered for the whole of forward and
// backward. Each unit's parameters are cut into buckets of at most reduce_bucket_size elements, in
// reverse registration order (roughly the order backward produces gradients, so buckets fill one
// after another). The same plan is used at every stage; only stage 3 gathers by unit.
//
// A declared unit may sit inside another (a routed unit, call_unit.h, inside its decoder layer):
// its parameters are its own, and the outer unit has the rest.
//
// Frozen parameters (requires_grad false) belong to units the same way. At stage 3 each unit's
// floating-point frozen parameters are cut into buckets of their own (unit_buckets.h):
// sharded, gathered and released with the unit, but given no gradients and never stepped.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "core/zero/call_unit.h"
#include "core/zero/flat_buffer.h"

namespace zt::zero {

struct Unit {
  std::string name;                                        // "" for the root unit
  const torch::nn::Module* module = nullptr;               // nullptr for the root unit
  std::vector<size_t> buckets;                             // indices into the engine's bucket list
  std::vector<std::pair<std::string, at::Tensor>> params;  // trainable, registration order
  std::vector<std::pair<std::string, at::Tensor>> frozen;  // requires_grad false, same order
  std::vector<size_t> frozen_buckets;  // stage 3: indices into the engine's frozen bucket list
  std::unique_ptr<UnitHooks> hooks;    // stage 3 only
  // The module is a zt::RoutedUnit: gathered only by its routing, never prefetched.
  bool routed = false;
};

struct UnitPlan {
  std::vector<std::unique_ptr<Unit>> units;  // declared units in order, root last
};

// Finds the declared units among the model's submodules (an unknown name, or a parameter in two
// units neither of which holds the other, is an error naming it).
UnitPlan plan_units(torch::nn::Module& model, const std::vector<std::string>& unit_names);

// The names of the submodules whose class is one of `types` (a policy instead of a list of
// names, as Hugging Face's _no_split_modules names the decoder-layer class), in registration
// order; a match inside another match is not one of its own. A type matches the class's name
// without namespaces, with or without LibTorch's Impl suffix ("GptBlock" and "GptBlockImpl" both
// match zt::models::GptBlockImpl). A type that matches nothing is an error naming it. The
// model must call these modules through zt::call_unit, as for units named by hand.
std::vector<std::string> units_of_types(const torch::nn::Module& model,
                                        const std::vector<std::string>& types);

// The flat-buffer layouts of one unit: `params` (trainable, registration order) reversed and cut
// into groups of at most reduce_bucket_size elements (dist::plan_buckets), each padded to `world`.
// make_buckets (unit_buckets.h) and partitioned construction (partitioned_init.h) both lay units
// out with it.
std::vector<dist::FlatLayout> lay_out_unit(
    const std::vector<std::pair<std::string, at::Tensor>>& params, int64_t reduce_bucket_size,
    int world);

}  // namespace zt::zero
