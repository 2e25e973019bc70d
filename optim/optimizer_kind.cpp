#include "optim/optimizer_kind.h"

#include <utility>

#include "base/error.h"

namespace zt::optim {

namespace {

constexpr std::pair<OptimizerKind, const char*> kNames[] = {
    {OptimizerKind::kAdam, "Adam"},         {OptimizerKind::kAdamW, "AdamW"},
    {OptimizerKind::kSgd, "SGD"},           {OptimizerKind::kLion, "Lion"},
    {OptimizerKind::kLamb, "Lamb"},         {OptimizerKind::kCpuAdam, "CpuAdam"},
    {OptimizerKind::kAdam8bit, "Adam8bit"}, {OptimizerKind::kFusedAdam, "FusedAdam"},
    {OptimizerKind::kMuon, "Muon"}};

}  // namespace

const char* optimizer_name(OptimizerKind kind) {
  for (const auto& [k, name] : kNames) {
    if (k == kind) return name;
  }
  return "?";
}

OptimizerKind optimizer_kind(const std::string& name) {
  for (const auto& [k, n] : kNames) {
    if (name == n) return k;
  }
  ZT_THROW(
      "optimizer.type must be one of Adam, AdamW, SGD, Lion, Lamb, CpuAdam, Adam8bit, FusedAdam, "
      "Muon; "
      "got \"",
      name, "\"");
}

}  // namespace zt::optim
