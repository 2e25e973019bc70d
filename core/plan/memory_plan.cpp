#include "core/plan/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>
#include <set>

#include <ATen/ATen.h>

#include "base/error.h"
#include "core/config/memory_estimate.h"
#include "core/zero/bucket_plan.h"
#include "core/zero/flat_buffer.h"
#include "core/zero/master_chunk.h"
#include "core/zero/nvme_optimizer.h"
#include "optim/param_groups.h"
#include "optim/shard_optimizer.h"

namespace zt::plan {
namespace {

// One flat buffer as the engine cuts it (core/zero/unit_buckets.cpp: a unit's parameters in
// reverse, cut at reduce_bucket_size, padded to the shard group).
struct PlannedBucket {
  size_t unit = 0;
  int64_t numel = 0, padded = 0, shard = 0;
  bool gathered_always = false;          // whole on every rank (below stage 3, or persistent)
  std::vector<optim::ParamInfo> params;  // in flat order
};

std::vector<PlannedBucket> cut_buckets(const ModelMemory& model, int64_t reduce_bucket_size, int n,
                                       int stage, int64_t persistence_threshold) {
  std::vector<PlannedBucket> out;
  for (size_t u = 0; u < model.units.size(); ++u) {
    const std::vector<PlannedParam> reversed(model.units[u].params.rbegin(),
                                             model.units[u].params.rend());
    std::vector<at::Tensor> shapes;
    for (const PlannedParam& p : reversed) {
      shapes.push_back(at::empty({p.numel}, at::TensorOptions().device(at::kMeta)));
    }
    size_t first = 0;
    for (size_t count : dist::plan_buckets(shapes, reduce_bucket_size)) {
      PlannedBucket b;
      b.unit = u;
      for (size_t i = first; i < first + count; ++i) {
        b.params.push_back({reversed[i].name, reversed[i].numel, b.numel});
        b.numel += reversed[i].numel;
      }
      first += count;
      b.padded = (b.numel + n - 1) / n * n;
      b.shard = b.padded / n;
      b.gathered_always = stage < 3 || zero::stays_gathered(stage, b.numel, persistence_threshold);
      out.push_back(b);
    }
  }
  return out;
}

// Live bytes by named part, per place; the peak of each place keeps a copy of the parts alive
// at that moment.
class Ledger {
 public:
  void add(const std::string& name, Place place, int64_t bytes) {
    if (bytes == 0) return;
    live_[{static_cast<int>(place), name}] += bytes;
    total_[static_cast<size_t>(place)] += bytes;
  }
  void sub(const std::string& name, Place place, int64_t bytes) { add(name, place, -bytes); }
  // Records the peaks now; `at` names the moment (for the device's).
  // `extra`: bytes alive only at this moment, at `extra_place`.
  void check(const std::string& at, int64_t extra = 0,
             const std::string& extra_name = std::string(), Place extra_place = Place::kDevice) {
    const int ep = static_cast<int>(extra_place);
    for (int p = 0; p < kPlaces; ++p) {
      const int64_t now = total_[static_cast<size_t>(p)] + (p == ep ? extra : 0);
      if (now > peak_[static_cast<size_t>(p)] || !seen_[static_cast<size_t>(p)]) {
        seen_[static_cast<size_t>(p)] = true;
        peak_[static_cast<size_t>(p)] = now;
        at_[static_cast<size_t>(p)] = at;
        std::vector<PlanPart>& parts = parts_[static_cast<size_t>(p)];
        parts.clear();
        for (const auto& [key, bytes] : live_) {
          if (key.first == p && bytes != 0) parts.push_back({key.second, Place(p), bytes});
        }
        if (p == ep && extra != 0) parts.push_back({extra_name, extra_place, extra});
      }
    }
  }
  MemoryPlan finish() const {
    MemoryPlan plan;
    for (int p = 0; p < kPlaces; ++p) {
      std::vector<PlanPart> parts = parts_[static_cast<size_t>(p)];
      std::sort(parts.begin(), parts.end(),
                [](const PlanPart& a, const PlanPart& b) { return a.bytes > b.bytes; });
      plan.parts.insert(plan.parts.end(), parts.begin(), parts.end());
      plan.peak[static_cast<size_t>(p)] = peak_[static_cast<size_t>(p)];
    }
    plan.device_peak_at = at_[0].empty() ? at_[1] : at_[0];
    return plan;
  }

 private:
  std::map<std::pair<int, std::string>, int64_t> live_;
  std::array<int64_t, kPlaces> total_{}, peak_{};
  std::array<bool, kPlaces> seen_{};
  std::array<std::string, kPlaces> at_;
  std::array<std::vector<PlanPart>, kPlaces> parts_;
};

// The largest range of consecutive elements of one parameter group in a rank's stepped range of
// the bucket (optim/param_groups.h: what the optimizer steps at once).
int64_t largest_group_range(const PlannedBucket& b, const Config& c, int64_t begin, int64_t end) {
  optim::ParamGroupOptions o;
  o.no_decay_patterns = c.parameter_groups.no_decay;
  o.llrd_decay = c.parameter_groups.layer_lr_decay;
  o.freeze_patterns = c.freeze;
  const optim::ParamGrouping grouping = optim::build_param_groups(b.params, o);
  int64_t largest = 0;
  for (const optim::GroupRange& r :
       optim::shard_group_ranges(grouping, b.params, begin, end, optim::GroupHyper{}, 1e-3)) {
    largest = std::max(largest, r.end - r.begin);
  }
  return largest;
}

}  // namespace

const char* to_string(Place p) {
  switch (p) {
    case Place::kDevice: return "device";
    case Place::kHost: return "host";
    case Place::kPinned: return "pinned";
    case Place::kNvme: return "nvme";
  }
  return "?";
}

std::string format_bytes(int64_t bytes) {
  char buf[48];
  const double b = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30)) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", b / double(int64_t{1} << 30));
  } else if (bytes >= (int64_t{1} << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", b / double(int64_t{1} << 20));
  } else if (bytes >= 1024) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", b / 1024.0);
  } else {
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
  }
  return buf;
}

PlanPart MemoryPlan::largest(Place place) const {
  PlanPart best;
  best.place = place;
  for (const PlanPart& p : parts) {
    if (p.place == place && p.bytes > best.bytes) best = p;
  }
  return best;
}

std::vector<std::string> MemoryPlan::lines() const {
  std::vector<std::string> out;
  for (int p = 0; p < kPlaces; ++p) {
    const Place place = Place(p);
    const int64_t total = peak_at(place);
    if (total == 0) continue;
    out.push_back(detail::str(to_string(place), " peak ", format_bytes(total),
                              place == Place::kDevice ? " (at " + device_peak_at + ")" : ""));
    for (const PlanPart& part : parts) {
      if (part.place == place) out.push_back("  " + format_bytes(part.bytes) + "  " + part.name);
    }
  }
  for (const std::string& n : notes) out.push_back("note: " + n);
  return out;
}

MemoryPlan plan_memory(const Config& c, int world_size, const ModelMemory& model,
                       const c10::Device& device, const std::string& backend) {
  ZT_CHECK(world_size > 0, "memory plan: world size must be > 0, got ", world_size);
  ZT_CHECK(!model.units.empty(), "memory plan: the model has no parameters");
  const ZeroConfig& z = c.zero_optimization;
  const int stage = z.stage;
  // core/engine_setup.cpp: ZeRO runs over the ranks holding this rank's tensor slices (experts),
  // world / tp (world / ep) of them; MiCS shards within groups of that world. The gradient
  // average is over the data-parallel ranks, world / (sp tp).
  const int tp = c.tensor_parallel.size(), ep = c.expert_parallel.size();
  const int sp = std::max(c.sequence_parallel_size, 1);
  ZT_CHECK(world_size % (tp * ep) == 0 && world_size % (sp * tp) == 0, "memory plan: world size ",
           world_size, " does not divide into tensor (", tp, "), expert (", ep, ") and sequence (",
           sp, ") groups");
  const int zero_world = world_size / (tp * ep);
  const int data_parallel = world_size / (sp * tp);
  const int n = stage == 3 && z.mics_shard_size > 0 && z.mics_shard_size < zero_world
                    ? z.mics_shard_size
                    : zero_world;
  const bool host_model = device.is_cpu();
  const Place dev = host_model ? Place::kHost : Place::kDevice;
  // Pinned memory exists only beside a device; on a CPU model it is plain host memory.
  const auto pinned_if = [&](bool pin) {
    return !host_model && pin ? Place::kPinned : Place::kHost;
  };
  const bool half = c.fp16.enabled || c.bf16.enabled;
  const int64_t p = half ? 2 : 4;
  // bf16.bf16_master_weights_and_grads: a bf16 master and gradient shard; bf16_optimizer_states:
  // Adam's moments in bf16 (core/config/memory_estimate.h).
  const ElementBytes eb = element_bytes(c);
  const bool bf16_master = eb.bf16_master;
  const int64_t a = eb.grad;
  // Under sequence parallelism gradients travel in seq_parallel_communication_data_type (fp32
  // unless given: core/config/engine_config.cpp), as DeepSpeed's engine sets it.
  const auto comm_bytes = [&]() -> int64_t {
    if (sp > 1) {
      const auto& d = c.seq_parallel_communication_data_type;
      return d ? dtype_bytes(*d) : 4;
    }
    return c.communication_data_type ? dtype_bytes(*c.communication_data_type) : a;
  };
  const int64_t comm = comm_bytes();
  const int64_t mb = eb.master;  // master bytes per element
  const int64_t s = eb.state;
  const char* master_name = bf16_master ? "bf16 master" : "fp32 master";
  const OffloadDevice opt_off = stage >= 1 ? z.offload_optimizer.device : OffloadDevice::kNone;
  const OffloadDevice par_off = stage == 3 ? z.offload_param.device : OffloadDevice::kNone;
  // core/zero/master_store.cpp: the master is the parameters themselves where they have its
  // dtype and live where the optimizer steps.
  const bool separate_master = (half && !bf16_master) ||
                               (opt_off != OffloadDevice::kNone && !host_model) ||
                               opt_off == OffloadDevice::kNvme || par_off == OffloadDevice::kNvme ||
                               (par_off == OffloadDevice::kCpu && !host_model);
  const int64_t max_inflight = std::max<int64_t>(1, c.communication.max_inflight_reductions);
  // core/engine_setup.cpp: a CPU model's reduced gradient slices wait in the NVMe optimizer
  // files (core/zero/grad_spill.h), held in memory only from their reduction to their write;
  // not under MiCS or a tensor or expert split.
  const bool spill_grads = host_model && stage >= 2 && opt_off == OffloadDevice::kNvme &&
                           n == zero_world && tp == 1 && ep == 1;

  std::vector<PlannedBucket> buckets =
      cut_buckets(model, z.reduce_bucket_size, n, stage, z.stage3_param_persistence_threshold);
  std::set<std::string> split_params;
  for (const PlannedUnit& u : model.units)
    for (const PlannedParam& q : u.params)
      if (q.split) split_params.insert(q.name);
  Ledger L;

  // Persistent parts.
  int64_t stepped_total = 0, largest_shard = 0;
  for (const PlannedBucket& b : buckets) {
    const int64_t stepped = stage == 0 ? b.padded : b.shard;
    stepped_total += stepped;
    if (b.gathered_always) {
      L.add("parameters (whole)", dev, p * b.padded);
    } else {
      largest_shard = std::max(largest_shard, b.shard);
    }
    // Gradients: stages 0-1 accumulate the whole buffer; stages 2-3 this rank's slice (which a
    // CPU model holds only from its first reduction to the step: release_grad_shard).
    if (stage <= 1) {
      L.add("gradient accumulation buffers (whole)", dev, a * b.padded);
    } else if (!host_model) {
      L.add("gradient slices", dev, a * b.shard);
    }
  }
  // Stage-3 shards, where offload_param puts them.
  int64_t in_cpu_left = std::max<int64_t>(z.offload_param.max_in_cpu, 0);
  int64_t on_disk_largest = 0, on_disk_buckets = 0;
  for (const PlannedBucket& b : buckets) {
    if (b.gathered_always) continue;
    if (par_off == OffloadDevice::kNone) {
      L.add("parameter shards", dev, p * b.shard);
    } else if (par_off == OffloadDevice::kCpu) {
      L.add("parameter shards (offload_param cpu)", pinned_if(z.offload_param.pin_memory),
            p * b.shard);
    } else if (b.shard <= in_cpu_left) {
      in_cpu_left -= b.shard;
      L.add("parameter shards within max_in_cpu", pinned_if(z.offload_param.pin_memory),
            p * b.shard);
    } else {
      in_cpu_left = 0;
      L.add("parameter shards (offload_param nvme)", Place::kNvme,
            (p * b.shard + 4095) / 4096 * 4096);
      on_disk_largest = std::max(on_disk_largest, b.shard);
      ++on_disk_buckets;
    }
  }
  if (on_disk_largest > 0) {
    // core/zero/nvme_params.h: buffer_count buffers (no more than the files), each the largest
    // shard's file size.
    L.add("offload_param swap buffers", Place::kHost,
          std::min<int64_t>(std::max<int64_t>(z.offload_param.buffer_count, 1), on_disk_buckets) *
              ((p * largest_shard + 4095) / 4096 * 4096));
  }
  // The master and the optimizer state.
  const int64_t master = separate_master ? mb * stepped_total : 0;
  const int64_t state = s * stepped_total;
  if (opt_off == OffloadDevice::kNone) {
    L.add(master_name, dev, master);
    L.add("optimizer state", dev, state);
  } else {
    if (opt_off == OffloadDevice::kCpu) {
      L.add(std::string(master_name) + " (offload_optimizer cpu)",
            pinned_if(z.offload_optimizer.pin_memory), master);
      L.add("optimizer state (offload_optimizer cpu)", Place::kHost, state);
    } else {
      // One file region per chunk of sub_group_size elements: master and each state page-rounded
      // (core/zero/nvme_optimizer.h; Adam's two moments, the only state the store holds there).
      // With the gradients spilled there, each chunk's file starts with its gradient region.
      const int64_t chunk = std::max<int64_t>(z.sub_group_size, 1);
      const int64_t g = spill_grads ? a : 0;
      int64_t disk = 0, grads_on_disk = 0, chunk_bytes_max = 0, chunks = 0, chunk_max = 0;
      for (const PlannedBucket& b : buckets) {
        const int64_t stepped = stage == 0 ? b.padded : b.shard;
        for (int64_t at = 0; at < stepped; at += chunk) {
          const int64_t m = std::min(chunk, stepped - at);
          const int64_t grad_region = zero::NvmeOptimizerSwapper::chunk_bytes(m, 0, 0, 0, g);
          const int64_t bytes = zero::NvmeOptimizerSwapper::chunk_bytes(m, 2, mb, s / 2, g);
          disk += bytes - grad_region;
          grads_on_disk += grad_region;
          chunk_bytes_max = std::max(chunk_bytes_max, bytes);
          chunk_max = std::max(chunk_max, m);
          ++chunks;
        }
      }
      L.add(std::string(master_name) + " and optimizer state (offload_optimizer nvme)",
            Place::kNvme, disk);
      L.add("gradient slices (offload_optimizer nvme)", Place::kNvme, grads_on_disk);
      L.add("offload_optimizer swap buffers", Place::kHost,
            std::min<int64_t>(std::max<int64_t>(z.offload_optimizer.buffer_count, 1), chunks) *
                chunk_bytes_max);
      L.add("gradient spill staging buffers", Place::kHost,
            zero::NvmeOptimizerSwapper::grad_staging_bytes(chunk_max, g));
    }
    if (!host_model && opt_off == OffloadDevice::kCpu && !bf16_master) {
      // The device model's offload slots (core/zero/host_offload.h): the gradient slice comes to
      // the host in fp32, the updated values go back to the device's parameters (not where the
      // step writes into host shards: offload_param). Beside NVMe chunks or a bf16 master the
      // copies are synchronous, with no slots.
      L.add("offload gradient slots (fp32)", Place::kPinned, 4 * stepped_total);
      if (par_off == OffloadDevice::kNone) {
        int64_t on_device = 0;
        for (const PlannedBucket& b : buckets) on_device += stage == 0 ? b.padded : b.shard;
        L.add("offload parameter slots", Place::kPinned, p * on_device);
      }
    }
  }
  int64_t frozen = 0;
  for (const PlannedUnit& u : model.units) frozen += u.frozen_bytes;
  L.add("frozen parameters", dev, frozen);
  if (par_off == OffloadDevice::kNvme) {
    // Construction: every 16-bit shard is placed in host memory before its file is written.
    int64_t shards = 0;
    for (const PlannedBucket& b : buckets)
      if (!b.gathered_always) shards += p * b.shard;
    L.add("16-bit shards on their way to NVMe (at start)", pinned_if(z.offload_param.pin_memory),
          shards);
    L.check("construction");
    L.sub("16-bit shards on their way to NVMe (at start)", pinned_if(z.offload_param.pin_memory),
          shards);
  }

  // Forward: stage-3 gathers and the activations, unit by unit.
  const size_t root = model.units.size() - 1;
  const bool gathers = stage == 3;
  std::vector<bool> gathered(buckets.size(), false);
  const auto gather = [&](size_t u) {
    if (!gathers) return;
    for (size_t i = 0; i < buckets.size(); ++i) {
      if (buckets[i].unit == u && !buckets[i].gathered_always && !gathered[i]) {
        gathered[i] = true;
        L.add("stage-3 units gathered", dev, p * buckets[i].padded);
      }
    }
  };
  const auto release = [&](size_t i) {
    if (gathers && gathered[i]) {
      gathered[i] = false;
      L.sub("stage-3 units gathered", dev, p * buckets[i].padded);
    }
  };
  // ParamGather::prefetch_after: the units after `u` in `direction`, until the budget is spent;
  // routed units are left to their routing and spend none of it.
  const auto prefetch = [&](size_t u, int direction) {
    if (!gathers) return;
    int64_t budget = z.stage3_prefetch_bucket_size;
    for (int64_t v = static_cast<int64_t>(u) + direction;
         v >= 0 && v < static_cast<int64_t>(root) && budget > 0; v += direction) {
      if (model.units[static_cast<size_t>(v)].routed) continue;
      for (const PlannedBucket& b : buckets)
        if (b.unit == static_cast<size_t>(v) && !b.gathered_always) budget -= b.padded;
      gather(static_cast<size_t>(v));
    }
  };
  // A unit with the routed units that follow it (inside it: a layer's experts), which are
  // gathered within its call; their activations are counted in its own.
  const auto with_routed = [&](size_t u) {
    std::vector<size_t> g{u};
    for (size_t v = u + 1; v < root && model.units[v].routed; ++v) g.push_back(v);
    return g;
  };
  const auto activations_of = [&](const std::vector<size_t>& g) {
    UnitActivations act;
    for (size_t v : g) {
      act.saved += model.units[v].activations.saved;
      act.forward_extra += model.units[v].activations.forward_extra;
      act.backward_extra += model.units[v].activations.backward_extra;
    }
    return act;
  };
  // Units used again within stage3_max_reuse_distance stay gathered from forward to backward
  // (zero::kept_for_backward, as ParamGather decides it); frozen parameters count by their bytes.
  std::vector<bool> kept;
  {
    std::vector<int64_t> numel;
    std::vector<bool> routed;
    for (const PlannedUnit& unit : model.units) {
      int64_t n = unit.frozen_bytes / p;
      for (const PlannedParam& q : unit.params) n += q.numel;
      numel.push_back(n);
      routed.push_back(unit.routed);
    }
    kept = zero::kept_for_backward(numel, routed, z.stage3_max_reuse_distance);
  }
  gather(root);  // the root stays gathered through forward and backward
  for (size_t u = 0; u < root; ++u) {
    if (model.units[u].routed) continue;
    const std::vector<size_t> g = with_routed(u);
    gather(u);
    prefetch(u, +1);
    for (size_t v : g) gather(v);
    const UnitActivations act = activations_of(g);
    L.check("forward of " + model.units[u].name, act.forward_extra, "activation transients", dev);
    L.add("activations", dev, act.saved);
    for (size_t i = 0; i < buckets.size(); ++i) {
      const size_t v = buckets[i].unit;
      if (std::find(g.begin(), g.end(), v) != g.end() && !kept[v]) release(i);
    }
  }
  const UnitActivations& head = model.units[root].activations;
  L.check("forward of the root (head, loss)", head.forward_extra, "activation transients", dev);
  L.add("activations", dev, head.saved);

  // Backward: the head first, its 16-bit gradients held to the end (the embedding's arrive last).
  int64_t root_numel = 0;
  for (const PlannedBucket& b : buckets)
    if (b.unit == root) root_numel += b.numel;
  L.add("root's 16-bit gradients", dev, p * root_numel);
  L.check("backward of the root (head, loss)", head.backward_extra, "activation transients", dev);
  L.sub("activations", dev, head.saved);
  std::deque<size_t> inflight;
  const bool staged = stage >= 2;  // MicroStepGrads: a staging buffer per bucket per micro-step
  // Reductions in flight: the input in the communication dtype where that differs; c10d's gloo
  // reduce-scatter works on a copy of its input; a device model's tensors pass through host
  // copies when the backend is a host one (parallel/staging_communicator.h).
  const bool host_backend = backend == "gloo" || backend == "mpi";
  // After a window's first micro-step the reduced slice lands in a new buffer that is then
  // added to the accumulated one (core/zero/grad_reduction.cpp: MicroStepGrads), so a window of
  // several micro-steps plans its later ones.
  const bool later_micro_step = c.gradient_accumulation_steps > 1;
  const auto in_flight_device = [&](const PlannedBucket& b) {
    return (comm != a ? comm * b.padded : 0) +
           (host_model && backend == "gloo" && stage >= 1 ? comm * b.padded : 0) +
           (later_micro_step || comm != a ? comm * b.shard : 0);
  };
  const auto in_flight_host = [&](const PlannedBucket& b) {
    if (host_model || !host_backend || stage < 1) return int64_t{0};
    return comm * (b.padded + b.shard) + (backend == "gloo" ? comm * b.padded : 0);
  };
  // The oldest reduction waited: its transients go, and a spilled slice once it is written.
  const auto finish_oldest = [&] {
    const PlannedBucket& b = buckets[inflight.front()];
    L.sub("gradient staging", dev, a * b.padded);
    L.sub("gradient reductions in flight", dev, in_flight_device(b));
    L.sub("gradient reductions in flight (host copies)", Place::kHost, in_flight_host(b));
    if (spill_grads) L.sub("gradient slices", dev, a * b.shard);
    inflight.pop_front();
  };
  const auto launch = [&](size_t i) {
    if (!staged) return;
    if (host_model) L.add("gradient slices", dev, a * buckets[i].shard);
    L.add("gradient reductions in flight", dev, in_flight_device(buckets[i]));
    L.add("gradient reductions in flight (host copies)", Place::kHost, in_flight_host(buckets[i]));
    inflight.push_back(i);
    while (static_cast<int64_t>(inflight.size()) > max_inflight) finish_oldest();
  };
  for (size_t u = root; u-- > 0;) {
    if (model.units[u].routed) continue;
    const std::vector<size_t> g = with_routed(u);
    gather(u);
    prefetch(u, -1);
    for (size_t v : g) gather(v);
    const UnitActivations act = activations_of(g);
    // The unit's buckets take gradients in flat order (its parameters in reverse), each staged
    // from its first gradient and reduced once complete; the unit's backward transients peak
    // while the first is filling. Its routed units' gradients come first (the experts' part of
    // the forward ran last).
    std::vector<size_t> order(g.begin() + 1, g.end());
    order.push_back(u);
    bool first = true;
    for (size_t w : order) {
      for (size_t i = 0; i < buckets.size(); ++i) {
        if (buckets[i].unit != w) continue;
        if (staged) L.add("gradient staging", dev, a * buckets[i].padded);
        if (first) {
          L.check("backward of " + model.units[u].name, act.backward_extra, "activation transients",
                  dev);
          first = false;
        } else {
          L.check("backward of " + model.units[u].name);
        }
        launch(i);
        release(i);
      }
    }
    if (first) {
      L.check("backward of " + model.units[u].name, act.backward_extra, "activation transients",
              dev);
    }
    L.sub("activations", dev, act.saved);
  }
  // The root's buckets complete last (the embedding), then every reduction is waited.
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i].unit == root && staged) L.add("gradient staging", dev, a * buckets[i].padded);
  }
  L.sub("root's 16-bit gradients", dev, p * root_numel);
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i].unit == root) launch(i);
  }
  L.check("reductions in flight at the end of backward");
  while (!inflight.empty()) finish_oldest();
  for (size_t i = 0; i < buckets.size(); ++i) release(i);

  // Step: stage 1's reduced slices; the optimizer's temporaries where the master lives on the
  // device (optim/adam.h: sqrt(v) and its quotient, one flat buffer's stepped range at a time).
  if (stage == 1) {
    // The boundary's reduce-scatter of each whole buffer into a new slice, at most
    // max_inflight_reductions in flight.
    int64_t reduced = 0, copies = 0;
    std::vector<int64_t> sizes;
    for (const PlannedBucket& b : buckets) {
      reduced += a * b.shard;
      sizes.push_back(in_flight_device(b));
    }
    std::sort(sizes.rbegin(), sizes.rend());
    for (size_t i = 0; i < sizes.size() && static_cast<int64_t>(i) < max_inflight; ++i) {
      copies += sizes[i];
    }
    L.add("stage-1 reduced gradient slices", dev, reduced);
    L.check("stage-1 reduction", copies, "gradient reductions in flight", dev);
  }
  if (ep > 1) {
    // ShardedStep::reduce_replicated_over_split: on the boundary the replicated parameters'
    // owned gradient ranges are packed and summed over the expert group, the pack staged through
    // host memory beside a device with a host backend (parallel/staging_communicator.h). The rank
    // with the most such elements.
    int64_t most = 0;
    for (int r = 0; r < n; ++r) {
      int64_t mine = 0;
      for (const PlannedBucket& b : buckets) {
        const int64_t begin = stage == 0 ? 0 : r * b.shard;
        const int64_t end = stage == 0 ? b.padded : begin + b.shard;
        for (const optim::ParamInfo& e : b.params) {
          if (split_params.count(e.name)) continue;
          mine +=
              std::max<int64_t>(0, std::min(end, e.offset + e.numel) - std::max(begin, e.offset));
        }
      }
      most = std::max(most, mine);
    }
    const bool host_copy = !host_model && host_backend;
    L.add("replicated gradients summed over the expert group (host copy)", Place::kHost,
          host_copy ? a * most : 0);
    L.check("the expert groups' sum of the replicated gradients", a * most,
            "replicated gradients summed over the expert group", dev);
    L.sub("replicated gradients summed over the expert group (host copy)", Place::kHost,
          host_copy ? a * most : 0);
  }
  int64_t step_temp = 0;
  // The largest piece stepped at once: a bf16 master is widened kWidenPiece elements at a time
  // (core/zero/master_chunk.h), an fp32 one is stepped a flat buffer's range at once.
  const int64_t piece = bf16_master ? zero::kWidenPiece : std::numeric_limits<int64_t>::max();
  if (bf16_master) {
    // The widened master, both moments and gradient of one piece, in fp32, where the master is.
    int64_t largest = 0;
    for (const PlannedBucket& b : buckets) largest = std::max(largest, b.shard);
    if (stage == 0) largest = 0;  // bf16 masters need stages 1-3
    step_temp += 4 * 4 * std::min(piece, largest);
  }
  if (opt_off == OffloadDevice::kNone && !host_model && !device.is_cuda()) {
    // optim/adam.h per group range: sqrt(v) and its quotient alive at once, and the gradient
    // times the step's scale (averaging, clipping, loss scale) when that is not 1.
    const bool scaled = c.gradient_clipping > 0 || c.fp16.enabled || data_parallel > 1 ||
                        c.gradient_accumulation_steps > 1;
    int64_t range = 0;
    for (const PlannedBucket& b : buckets) {
      range = std::max(range, largest_group_range(b, c, 0, stage == 0 ? b.padded : b.shard));
    }
    step_temp += (scaled ? 3 : 2) * 4 * std::min(range, piece);
  }
  L.check("step", step_temp, "optimizer temporaries", dev);

  MemoryPlan plan = L.finish();
  if (model.activations_source.empty()) {
    plan.notes.push_back("activations not known: model states and buffers only");
  } else {
    plan.notes.push_back("activations: " + model.activations_source);
  }
  if (stage == 3) {
    plan.notes.push_back(
        "stage3_max_live_parameters does not act (prefetch follows stage3_prefetch_bucket_size)");
  }
  // What the config turns on that the plan does not count yet.
  std::vector<std::string> missing;
  if (stage == 3 && z.zero_hpz_partition_size > 1) missing.push_back("hpZ's secondary copies");
  if (z.zero_quantized_weights || z.zero_quantized_gradients ||
      z.zero_quantized_nontrainable_weights) {
    missing.push_back("ZeRO++'s int8 buffers");
  }
  for (const std::string& m : missing) plan.notes.push_back("not in this plan: " + m);
  return plan;
}

}  // namespace zt::plan
