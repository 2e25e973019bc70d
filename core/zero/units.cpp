#include "core/zero/units.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "base/error.h"

namespace zt::zero {

std::vector<std::string> units_of_types(const torch::nn::Module& model,
                                        const std::vector<std::string>& types) {
  auto bare = [](std::string n) {
    const size_t colon = n.rfind("::");
    if (colon != std::string::npos) n = n.substr(colon + 2);
    if (n.size() > 4 && n.compare(n.size() - 4, 4, "Impl") == 0) n.resize(n.size() - 4);
    return n;
  };
  std::unordered_set<std::string> wanted;
  for (const auto& t : types) wanted.insert(bare(t));
  std::unordered_set<std::string> found;
  std::vector<std::string> names;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    const std::string& name = item.key();
    bool inside = false;
    for (const auto& u : names) inside = inside || name.rfind(u + ".", 0) == 0;
    const std::string type = bare(item.value()->name());
    if (inside || !wanted.count(type)) continue;
    names.push_back(name);
    found.insert(type);
  }
  for (const auto& t : types) {
    ZT_CHECK(found.count(bare(t)), "stage-3 unit type '", t, "' matches no submodule of the model");
  }
  return names;
}

UnitPlan plan_units(torch::nn::Module& model, const std::vector<std::string>& unit_names) {
  std::unordered_map<std::string, std::shared_ptr<torch::nn::Module>> modules;
  for (const auto& item : model.named_modules()) modules[item.key()] = item.value();
  // A parameter belongs to the innermost declared unit that holds it: units nested in others
  // claim theirs first.
  std::vector<size_t> claim_order(unit_names.size());
  for (size_t i = 0; i < claim_order.size(); ++i) claim_order[i] = i;
  const auto depth = [&](size_t i) {
    return std::count(unit_names[i].begin(), unit_names[i].end(), '.');
  };
  std::stable_sort(claim_order.begin(), claim_order.end(),
                   [&](size_t a, size_t b) { return depth(a) > depth(b); });
  UnitPlan plan;
  plan.units.resize(unit_names.size());
  std::unordered_map<const void*, size_t> claimed;  // parameter -> unit
  for (size_t i : claim_order) {
    const std::string& name = unit_names[i];
    auto it = modules.find(name);
    ZT_CHECK(it != modules.end(), "engine unit '", name, "' is not a submodule of the model");
    auto unit = std::make_unique<Unit>();
    unit->name = name;
    unit->module = it->second.get();
    unit->routed = dynamic_cast<const RoutedUnit*>(unit->module) != nullptr;
    for (const auto& p : it->second->named_parameters(/*recurse=*/true)) {
      auto [at, fresh] = claimed.emplace(p.value().unsafeGetTensorImpl(), i);
      if (!fresh) {
        const std::string& inner = unit_names[at->second];
        ZT_CHECK(inner.rfind(name + ".", 0) == 0, "parameter ", name, ".", p.key(),
                 " belongs to two engine units");
        continue;  // a nested unit's
      }
      (p.value().requires_grad() ? unit->params : unit->frozen)
          .emplace_back(name + "." + p.key(), p.value());
    }
    plan.units[i] = std::move(unit);
  }
  auto root = std::make_unique<Unit>();
  for (const auto& p : model.named_parameters(/*recurse=*/true)) {
    if (claimed.count(p.value().unsafeGetTensorImpl())) continue;
    (p.value().requires_grad() ? root->params : root->frozen).emplace_back(p.key(), p.value());
  }
  plan.units.push_back(std::move(root));
  return plan;
}

std::vector<dist::FlatLayout> lay_out_unit(
    const std::vector<std::pair<std::string, at::Tensor>>& params, int64_t reduce_bucket_size,
    int world) {
  std::vector<std::pair<std::string, at::Tensor>> reversed(params.rbegin(), params.rend());
  std::vector<at::Tensor> tensors;
  for (auto& p : reversed) tensors.push_back(p.second);
  std::vector<dist::FlatLayout> layouts;
  size_t first = 0;
  for (size_t count : dist::plan_buckets(tensors, reduce_bucket_size)) {
    layouts.emplace_back(std::vector<std::pair<std::string, at::Tensor>>(
                             reversed.begin() + first, reversed.begin() + first + count),
                         world);
    first += count;
  }
  return layouts;
}

}  // namespace zt::zero
