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
  UnitPlan plan;
  std::unordered_set<const void*> claimed;
  for (const auto& name : unit_names) {
    auto it = modules.find(name);
    ZT_CHECK(it != modules.end(), "engine unit '", name, "' is not a submodule of the model");
    auto unit = std::make_unique<Unit>();
    unit->name = name;
    unit->module = it->second.get();
    for (const auto& p : it->second->named_parameters(/*recurse=*/true)) {
      ZT_CHECK(claimed.insert(p.value().unsafeGetTensorImpl()).second, "parameter ", name, ".",
               p.key(), " belongs to two engine units");
      (p.value().requires_grad() ? unit->params : unit->frozen)
          .emplace_back(name + "." + p.key(), p.value());
    }
    plan.units.push_back(std::move(unit));
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
