#include "core/zero/call_unit.h"

namespace zt {

UnitRegistry& UnitRegistry::instance() {
  static UnitRegistry registry;
  return registry;
}

void UnitRegistry::add(const torch::nn::Module* module, UnitHooks* hooks) {
  std::lock_guard<std::mutex> lock(mutex_);
  hooks_[module] = hooks;
}

void UnitRegistry::remove(const torch::nn::Module* module) {
  std::lock_guard<std::mutex> lock(mutex_);
  hooks_.erase(module);
}

UnitHooks* UnitRegistry::find(const torch::nn::Module* module) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = hooks_.find(module);
  return it == hooks_.end() ? nullptr : it->second;
}

}  // namespace zt
