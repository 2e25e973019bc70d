#include "core/config/memory_estimate.h"

#include <algorithm>
#include <cstdio>

#include "base/error.h"

namespace zt {

int64_t optimizer_state_bytes_per_element(const Config& c) {
  if (!c.optimizer) return 8;  // the program's own optimizer: assume Adam
  switch (c.optimizer->type) {
    case OptimizerType::kAdam:
    case OptimizerType::kAdamW:
    case OptimizerType::kCpuAdam:
    case OptimizerType::kFusedAdam:
    case OptimizerType::kLamb:
    case OptimizerType::kMuon: return 8;  // exp_avg (Muon: also its momentum), exp_avg_sq
    case OptimizerType::kSgd: return c.optimizer->momentum > 0 ? 4 : 0;
    case OptimizerType::kLion: return 4;      // exp_avg
    case OptimizerType::kAdam8bit: return 2;  // one byte each, block scales aside
  }
  return 8;
}

namespace {

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return buf;
}

}  // namespace

int64_t dtype_bytes(DType d) {
  return d == DType::kFp32 ? 4 : 2;
}

ElementBytes element_bytes(const Config& c) {
  ElementBytes e;
  e.bf16_master =
      c.bf16.enabled && c.bf16.bf16_master_weights_and_grads && c.zero_optimization.stage >= 1;
  e.grad = c.data_types.grad_accum_dtype ? dtype_bytes(*c.data_types.grad_accum_dtype)
           : e.bf16_master               ? 2
                                         : 4;
  e.master = e.bf16_master ? 2 : 4;
  e.state = optimizer_state_bytes_per_element(c);
  if (e.bf16_master && c.bf16.bf16_optimizer_states) e.state /= 2;
  return e;
}

std::vector<MemoryEstimate> estimate_model_states(const Config& c, int64_t params, int world_size) {
  ZT_CHECK(params > 0, "--params must be > 0, got ", params);
  ZT_CHECK(world_size > 0, "world size must be > 0, got ", world_size);
  const ZeroConfig& z = c.zero_optimization;
  // Hybrid sharding shards over its group only (every group holds a copy).
  const int64_t stage = z.stage;
  const int64_t n = stage == 3 && z.mics_shard_size > 0 && z.mics_shard_size < world_size
                        ? z.mics_shard_size
                        : world_size;
  const bool half = c.fp16.enabled || c.bf16.enabled;
  const int64_t p = half ? 2 : 4;
  const ElementBytes eb = element_bytes(c);
  const bool bf16_master = eb.bf16_master;
  const int64_t a = eb.grad;
  const int64_t s = eb.state;
  const int64_t sharded = (params + n - 1) / n;  // elements this rank steps at stages 1-3
  const int64_t param_bytes = p * (stage == 3 ? sharded : params);
  const int64_t grad_bytes = a * (stage >= 2 ? sharded : params);
  const int64_t stepped = stage == 0 ? params : sharded;
  std::vector<MemoryEstimate> out;
  // Parameter offload exists at stage 3 only.
  std::vector<OffloadDevice> param_choices = {OffloadDevice::kNone};
  if (stage == 3) param_choices = {OffloadDevice::kNone, OffloadDevice::kCpu, OffloadDevice::kNvme};
  for (OffloadDevice pd : param_choices) {
    for (OffloadDevice d : {OffloadDevice::kNone, OffloadDevice::kCpu, OffloadDevice::kNvme}) {
      MemoryEstimate e;
      e.param_offload = pd;
      e.optimizer_offload = d;
      // The fp32 master is separate with 16-bit compute, any optimizer offload, or parameters on
      // NVMe; fp32 parameters are their own master otherwise.
      // A bf16 master is the bf16 parameters themselves where they live beside the optimizer.
      const int64_t m = bf16_master
                            ? (d != OffloadDevice::kNone || pd == OffloadDevice::kNvme ? 2 : 0)
                        : half || d != OffloadDevice::kNone || pd == OffloadDevice::kNvme ? 4
                                                                                          : 0;
      const int64_t opt = (m + s) * stepped;
      e.device_bytes = grad_bytes + (d == OffloadDevice::kNone ? opt : 0);
      if (d == OffloadDevice::kCpu) e.host_bytes = opt;
      if (d == OffloadDevice::kNvme) {
        e.nvme_bytes = opt;
        const int64_t chunk = std::min<int64_t>(std::max<int64_t>(z.sub_group_size, 1), stepped);
        const int64_t chunks = (stepped + chunk - 1) / chunk;
        e.host_bytes =
            std::min<int64_t>(std::max<int64_t>(z.offload_optimizer.buffer_count, 1), chunks) *
            (m + s) * chunk;
      }
      if (pd == OffloadDevice::kNone) {
        e.device_bytes += param_bytes;
      } else if (pd == OffloadDevice::kCpu) {
        e.host_bytes += param_bytes;
      } else {
        // The first max_in_cpu elements stay in host memory; the rest stream through
        // buffer_count buffers (a shard each, at most buffer_size elements).
        const OffloadConfig& o = z.offload_param;
        const int64_t in_cpu = std::min<int64_t>(std::max<int64_t>(o.max_in_cpu, 0), sharded);
        const int64_t on_disk = sharded - in_cpu;
        e.host_bytes += p * in_cpu;
        if (on_disk > 0) {
          e.nvme_bytes += p * on_disk;
          e.host_bytes += std::max<int64_t>(o.buffer_count, 1) * p *
                          std::min<int64_t>(std::max<int64_t>(o.buffer_size, 1), on_disk);
        }
      }
      out.push_back(e);
    }
  }
  return out;
}

std::vector<std::string> memory_estimate_lines(const Config& c, int64_t params, int world_size) {
  std::vector<std::string> lines;
  const bool half = c.fp16.enabled || c.bf16.enabled;
  lines.push_back(
      detail::str("model states per rank for ", params, " parameters, ", world_size,
                  " rank(s), stage ", c.zero_optimization.stage,
                  c.zero_optimization.stage == 3 && c.zero_optimization.mics_shard_size > 0 &&
                          c.zero_optimization.mics_shard_size < world_size
                      ? detail::str(" sharded in groups of ", c.zero_optimization.mics_shard_size)
                      : std::string(),
                  ", ",
                  c.fp16.enabled   ? "fp16"
                  : c.bf16.enabled ? "bf16"
                                   : "fp32",
                  " compute", half ? " + fp32 master" : "",
                  " (padding and stage-3 units in flight come on top):"));
  const ZeroConfig& z = c.zero_optimization;
  const OffloadDevice own_param = z.stage == 3 ? z.offload_param.device : OffloadDevice::kNone;
  for (const MemoryEstimate& e : estimate_model_states(c, params, world_size)) {
    const bool mine =
        e.optimizer_offload == z.offload_optimizer.device && e.param_offload == own_param;
    lines.push_back(detail::str(
        "  ", z.stage == 3 ? std::string("offload_param ") + to_string(e.param_offload) + ", " : "",
        "offload_optimizer ", to_string(e.optimizer_offload), ": device ", gib(e.device_bytes),
        ", host ", gib(e.host_bytes), ", nvme ", gib(e.nvme_bytes),
        mine ? "   <- this config" : ""));
  }
  return lines;
}

}  // namespace zt
