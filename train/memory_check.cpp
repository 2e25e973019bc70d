#include "train/memory_check.h"

#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <sys/statvfs.h>
#include <vector>

#include <c10/core/CachingDeviceAllocator.h>

#include "base/error.h"
#include "base/logging.h"
#include "core/zero/call_unit.h"

namespace zt::train {
namespace {

using plan::Place;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

int64_t gib(double g) {
  return static_cast<int64_t>(g * kGiB);
}

// MemAvailable from /proc/meminfo; -1 when unreadable.
int64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return -1;
}

std::string nvme_path(const Config& c) {
  const ZeroConfig& z = c.zero_optimization;
  if (z.offload_optimizer.device == OffloadDevice::kNvme && !z.offload_optimizer.nvme_path.empty())
    return z.offload_optimizer.nvme_path;
  if (z.offload_param.device == OffloadDevice::kNvme && !z.offload_param.nvme_path.empty())
    return z.offload_param.nvme_path;
  return "";
}

// Bytes a place needs against its limit: pinned memory is host memory.
int64_t needed(const plan::MemoryPlan& p, Place place) {
  if (place == Place::kHost) return p.peak_at(Place::kHost) + p.peak_at(Place::kPinned);
  return p.peak_at(place);
}

// The first place the plan overflows, if any.
std::optional<Place> overflow(const plan::MemoryPlan& p, const MemoryLimits& l) {
  for (Place place : {Place::kDevice, Place::kHost, Place::kNvme}) {
    const int64_t limit = l.bytes[static_cast<size_t>(place)];
    if (limit >= 0 && needed(p, place) > limit) return place;
  }
  return std::nullopt;
}

struct Change {
  std::string name;
  std::function<bool(Config&)> apply;  // false: does not apply to this config
  bool checkpointing = false;
};

std::vector<Change> changes(bool checkpointing) {
  std::vector<Change> out;
  out.push_back({"zero_optimization.stage: 3", [](Config& c) {
                   if (c.zero_optimization.stage == 3) return false;
                   c.zero_optimization.stage = 3;
                   return true;
                 }});
  for (OffloadDevice d : {OffloadDevice::kCpu, OffloadDevice::kNvme}) {
    out.push_back({std::string("zero_optimization.offload_optimizer.device: ") + to_string(d),
                   [d](Config& c) {
                     OffloadConfig& o = c.zero_optimization.offload_optimizer;
                     if (c.zero_optimization.stage == 0 || o.device != OffloadDevice::kNone)
                       return false;
                     o.device = d;
                     return true;
                   }});
  }
  for (OffloadDevice d : {OffloadDevice::kCpu, OffloadDevice::kNvme}) {
    out.push_back(
        {std::string("zero_optimization.offload_param.device: ") + to_string(d), [d](Config& c) {
           OffloadConfig& o = c.zero_optimization.offload_param;
           if (c.zero_optimization.stage != 3 || o.device != OffloadDevice::kNone) return false;
           o.device = d;
           return true;
         }});
  }
  // Smaller chunks of the optimizer on NVMe: smaller swap buffers.
  for (int64_t size : {int64_t{100'000'000}, int64_t{10'000'000}, int64_t{1'000'000}}) {
    out.push_back({"zero_optimization.sub_group_size: " + std::to_string(size), [size](Config& c) {
                     ZeroConfig& z = c.zero_optimization;
                     if (!z.optimizer_on_nvme() || z.sub_group_size <= size) return false;
                     z.sub_group_size = size;
                     return true;
                   }});
  }
  out.push_back({"zero_optimization.reduce_bucket_size: half", [](Config& c) {
                   ZeroConfig& z = c.zero_optimization;
                   if (z.reduce_bucket_size < 2) return false;
                   z.reduce_bucket_size /= 2;
                   return true;
                 }});
  if (!checkpointing)
    out.push_back({"activation checkpointing", [](Config&) { return true; }, true});
  return out;
}

}  // namespace

plan::ModelMemory model_memory(const torch::nn::Module& model,
                               const std::vector<std::string>& units,
                               const std::set<std::string>& split) {
  plan::ModelMemory m;
  std::map<std::string, const torch::nn::Module*> modules;
  for (const auto& item : model.named_modules()) modules[item.key()] = item.value().get();
  for (const std::string& u : units) {
    m.units.push_back({u, {}, 0, {}});
    const auto it = modules.find(u);
    m.units.back().routed =
        it != modules.end() && dynamic_cast<const RoutedUnit*>(it->second) != nullptr;
  }
  m.units.push_back({"root", {}, 0, {}});
  for (const auto& p : model.named_parameters(/*recurse=*/true)) {
    size_t at = units.size();  // the root
    for (size_t i = 0; i < units.size(); ++i) {
      const bool inside = p.key().rfind(units[i] + ".", 0) == 0;
      if (inside && (at == units.size() || units[i].size() > units[at].size())) at = i;
    }
    plan::PlannedUnit& unit = m.units[at];
    if (p.value().requires_grad()) {
      unit.params.push_back({p.key(), p.value().numel(), split.count(p.key()) > 0});
    } else {
      unit.frozen_bytes += p.value().numel() * static_cast<int64_t>(p.value().element_size());
    }
  }
  if (m.units.back().params.empty() && m.units.size() > 1) {
    // No root parameters: the last declared unit stands in as the root.
    m.units.pop_back();
  }
  return m;
}

MemoryLimits memory_limits(const Config& c, const c10::Device& device, const dist::Env& env) {
  MemoryLimits l;
  l.ranks_sharing = std::max(env.local_world_size, 1);
  const MemoryPlanConfig& m = c.memory_plan;
  const auto at = [](Place p) { return static_cast<size_t>(p); };
  if (m.device_limit_gib > 0) {
    l.bytes[at(Place::kDevice)] = gib(m.device_limit_gib);
    l.source[at(Place::kDevice)] = "memory_plan.device_limit_gib";
  } else if (device.is_cuda()) {
    const auto [free, total] = c10::getDeviceAllocator(c10::kCUDA)->getMemoryInfo(device.index());
    (void)total;
    l.bytes[at(Place::kDevice)] = static_cast<int64_t>(free);
    l.source[at(Place::kDevice)] = device.str() + "'s free memory";
  }
  int64_t host = -1;
  if (m.host_limit_gib > 0) {
    host = gib(m.host_limit_gib);
    l.source[at(Place::kHost)] = "memory_plan.host_limit_gib";
  } else {
    host = mem_available();
    l.source[at(Place::kHost)] = "MemAvailable";
  }
  if (host >= 0) l.bytes[at(Place::kHost)] = host / l.ranks_sharing;
  int64_t disk = -1;
  if (m.nvme_limit_gib > 0) {
    disk = gib(m.nvme_limit_gib);
    l.source[at(Place::kNvme)] = "memory_plan.nvme_limit_gib";
  } else if (const std::string path = nvme_path(c); !path.empty()) {
    struct statvfs s {};
    if (statvfs(path.c_str(), &s) == 0) {
      disk = static_cast<int64_t>(s.f_bavail) * static_cast<int64_t>(s.f_frsize);
      l.source[at(Place::kNvme)] = "free space at " + path;
    }
  }
  if (disk >= 0) l.bytes[at(Place::kNvme)] = disk / l.ranks_sharing;
  // On a CPU model the device is host memory: the plan puts nothing at kDevice.
  return l;
}

std::string memory_refusal(const plan::MemoryPlan& p, const MemoryLimits& l, const Config& config,
                           bool checkpointing, const Replan& replan) {
  const std::optional<Place> over = overflow(p, l);
  if (!over) return "";
  const size_t i = static_cast<size_t>(*over);
  std::ostringstream line;
  line << "memory plan: " << to_string(*over) << " needs " << plan::format_bytes(needed(p, *over))
       << " per rank but the limit is " << plan::format_bytes(l.bytes[i]) << " (" << l.source[i];
  if (*over != Place::kDevice && l.ranks_sharing > 1) {
    line << ", shared by " << l.ranks_sharing << " ranks";
  }
  plan::PlanPart largest = p.largest(*over);
  if (*over == Place::kHost) {
    const plan::PlanPart pinned = p.largest(Place::kPinned);
    if (pinned.bytes > largest.bytes) largest = pinned;
  }
  line << "); largest part: " << largest.name << " " << plan::format_bytes(largest.bytes);
  // Each change alone, then two at a time, planned again.
  const std::vector<Change> all = changes(checkpointing);
  std::vector<std::string> fits;
  const auto tryit = [&](const std::vector<const Change*>& picked) {
    Config c = config;
    bool ckpt = checkpointing;
    std::string name;
    for (const Change* ch : picked) {
      if (!ch->apply(c)) return;
      ckpt = ckpt || ch->checkpointing;
      name += (name.empty() ? "" : " + ") + ch->name;
    }
    if (!overflow(replan(c, ckpt), l)) fits.push_back(name);
  };
  for (const Change& a : all) tryit({&a});
  if (fits.empty()) {
    for (size_t x = 0; x < all.size(); ++x)
      for (size_t y = x + 1; y < all.size(); ++y) tryit({&all[x], &all[y]});
  }
  if (fits.empty()) {
    line << "; no change tried fits (more ranks, a smaller model or micro-batch)";
  } else {
    line << "; fits with: ";
    for (size_t k = 0; k < fits.size() && k < 4; ++k) line << (k ? "; or " : "") << fits[k];
  }
  line << " (memory_plan.start_anyway: true starts it anyway)";
  return line.str();
}

void check_memory_plan(const plan::MemoryPlan& p, const Config& config, const c10::Device& device,
                       const dist::Env& env, bool checkpointing, const Replan& replan) {
  if (!config.memory_plan.enabled) return;
  for (const std::string& l : p.lines()) ZT_LOG_INFO("memory plan per rank: ", l);
  const std::string refusal =
      memory_refusal(p, memory_limits(config, device, env), config, checkpointing, replan);
  if (refusal.empty()) return;
  if (config.memory_plan.start_anyway) {
    ZT_LOG_WARN(refusal);
    return;
  }
  ZT_THROW(refusal);
}

plan::MemoryPlan plan_and_check(const Config& config, const c10::Device& device,
                                const dist::Env& env, bool checkpointing, const Replan& replan) {
  plan::MemoryPlan p = replan(config, false);
  check_memory_plan(p, config, device, env, checkpointing, replan);
  return p;
}

}  // namespace zt::train
