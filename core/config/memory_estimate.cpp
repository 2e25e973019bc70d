#include "core/config/memory_estimate.h"

#include <algorithm>
#include <cstdio>

#include "core/base/error.h"

namespace zt {
namespace {

// Bytes of optimizer state per stepped element (optim/shard_optimizer.h: what each one keeps).
int64_t state_bytes(const Config& c) {
  if (!c.optimizer) return 8;  // the program's own optimizer: assume Adam
  switch (c.optimizer->type) {
    case OptimizerType::kAdam:
    case OptimizerType::kAdamW:
    case OptimizerType::kCpuAdam:
    case OptimizerType::kLamb: return 8;  // exp_avg, exp_avg_sq
    case OptimizerType::kSgd: return c.optimizer->momentum > 0 ? 4 : 0;
    case OptimizerType::kLion: return 4;      // exp_avg
    case OptimizerType::kAdam8bit: return 2;  // one byte each, block scales aside
  }
  return 8;
}

int64_t dtype_bytes(DType d) {
  return d == DType::kFp32 ? 4 : 2;
}

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return buf;
}

}  // namespace

std::vector<MemoryEstimate> estimate_model_states(const Config& c, int64_t params, int world_size) {
  ZT_CHECK(params > 0, "--params must be > 0, got ", params);
  ZT_CHECK(world_size > 0, "world size must be > 0, got ", world_size);
  const ZeroConfig& z = c.zero_optimization;
  const int64_t n = world_size, stage = z.stage;
  const bool half = c.fp16.enabled || c.bf16.enabled;
  const int64_t p = half ? 2 : 4;
  const int64_t a = c.data_types.grad_accum_dtype ? dtype_bytes(*c.data_types.grad_accum_dtype) : 4;
  const int64_t s = state_bytes(c);
  const int64_t sharded = (params + n - 1) / n;  // elements this rank steps at stages 1-3
  const int64_t param_bytes = p * (stage == 3 ? sharded : params);
  const int64_t grad_bytes = a * (stage >= 2 ? sharded : params);
  const int64_t stepped = stage == 0 ? params : sharded;
  std::vector<MemoryEstimate> out;
  for (OffloadDevice d : {OffloadDevice::kNone, OffloadDevice::kCpu, OffloadDevice::kNvme}) {
    MemoryEstimate e;
    e.optimizer_offload = d;
    // The fp32 master is separate with 16-bit compute or any offload; fp32 parameters are their
    // own master otherwise.
    const int64_t m = half || d != OffloadDevice::kNone ? 4 : 0;
    const int64_t opt = (m + s) * stepped;
    e.device_bytes = param_bytes + grad_bytes + (d == OffloadDevice::kNone ? opt : 0);
    if (d == OffloadDevice::kCpu) e.host_bytes = opt;
    if (d == OffloadDevice::kNvme) {
      e.nvme_bytes = opt;
      const int64_t chunk = std::min<int64_t>(std::max<int64_t>(z.sub_group_size, 1), stepped);
      const int64_t chunks = (stepped + chunk - 1) / chunk;
      e.host_bytes =
          std::min<int64_t>(std::max<int64_t>(z.offload_optimizer.buffer_count, 1), chunks) *
          (m + s) * chunk;
    }
    out.push_back(e);
  }
  return out;
}

std::vector<std::string> memory_estimate_lines(const Config& c, int64_t params, int world_size) {
  std::vector<std::string> lines;
  const bool half = c.fp16.enabled || c.bf16.enabled;
  lines.push_back(detail::str("model states per rank for ", params, " parameters, ", world_size,
                              " rank(s), stage ", c.zero_optimization.stage, ", ",
                              c.fp16.enabled   ? "fp16"
                              : c.bf16.enabled ? "bf16"
                                               : "fp32",
                              " compute", half ? " + fp32 master" : "",
                              " (padding and stage-3 units in flight come on top):"));
  for (const MemoryEstimate& e : estimate_model_states(c, params, world_size)) {
    const bool mine = e.optimizer_offload == c.zero_optimization.offload_optimizer.device;
    lines.push_back(detail::str("  offload_optimizer ", to_string(e.optimizer_offload), ": device ",
                                gib(e.device_bytes), ", host ", gib(e.host_bytes), ", nvme ",
                                gib(e.nvme_bytes), mine ? "   <- this config" : ""));
  }
  if (c.zero_optimization.offload_param.device != OffloadDevice::kNone) {
    lines.push_back("  offload_param: not implemented, not estimated");
  }
  return lines;
}

}  // namespace zt
