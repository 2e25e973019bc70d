// core/plan/memory_plan.h on a model small enough to follow by hand: the peak is where the
// engine's schedule puts it (prefetch budget, reductions left in flight), with the parts alive
// there named, and each rule moves it by the bytes it should.

#include "core/plan/memory_plan.h"

#include <gtest/gtest.h>

namespace zt::plan {
namespace {

Config with(const std::string& yaml, int world = 2) {
  return parse_config("train_batch_size: 4\n" + yaml, ConfigFormat::kYaml, {}, world);
}

// Four units of one 1000-element parameter and a root of 10, each unit keeping 100 bytes of
// activations.
ModelMemory four_units() {
  ModelMemory m;
  for (int i = 0; i < 4; ++i) {
    m.units.push_back(
        {"u" + std::to_string(i), {{"u" + std::to_string(i) + ".w", 1000}}, 0, {100, 0, 0}});
  }
  m.units.push_back({"root", {{"emb.weight", 10}}, 0, {}});
  m.activations_source = "given";
  int64_t total = 0;
  for (const auto& u : m.units) total += u.activations.saved;
  EXPECT_EQ(total, 400);
  return m;
}

int64_t part(const MemoryPlan& p, Place place, const std::string& name) {
  for (const PlanPart& q : p.parts)
    if (q.place == place && q.name == name) return q.bytes;
  return 0;
}

const c10::Device kDevice(c10::DeviceType::PrivateUse1, 0);

// Stage 3, 2 ranks, bf16, AdamW, everything sharded, prefetch one unit ahead, one reduction
// left in flight, each unit released after its forward (stage3_max_reuse_distance 0). Persistent
// per rank: 16-bit shards 4 x 2 x 500 + 2 x 5 = 4010, fp32 gradient slices, master 4 x 2005 = 8020
// each, Adam 16040: 36090. The peak is the backward of u2: u2 and the prefetched u1 gathered (2 x 2
// x 1000) with the root (20), the activations of u0-u2 (300), the root's 16-bit gradients (20),
// u2's staging and u3's still in flight (2 x 4000): 12340 more.
TEST(MemoryPlan, Stage3PeaksInTheBackwardWithWhatIsGatheredAndInFlight) {
  const Config c = with(
      "bf16: {enabled: true}\noptimizer: {type: AdamW}\n"
      "communication: {max_inflight_reductions: 1}\n"
      "zero_optimization: {stage: 3, stage3_prefetch_bucket_size: 1000, "
      "stage3_param_persistence_threshold: 0, stage3_max_reuse_distance: 0}");
  const MemoryPlan p = plan_memory(c, 2, four_units(), kDevice, "nccl");
  EXPECT_EQ(p.peak_at(Place::kDevice), 36090 + 12340) << p.device_peak_at;
  EXPECT_EQ(p.device_peak_at, "backward of u2");
  EXPECT_EQ(part(p, Place::kDevice, "parameter shards"), 4010);
  EXPECT_EQ(part(p, Place::kDevice, "optimizer state"), 16040);
  EXPECT_EQ(part(p, Place::kDevice, "stage-3 units gathered"), 4020);
  EXPECT_EQ(part(p, Place::kDevice, "gradient staging"), 8000);
  EXPECT_EQ(part(p, Place::kDevice, "activations"), 300);
  EXPECT_EQ(p.peak_at(Place::kHost) + p.peak_at(Place::kPinned) + p.peak_at(Place::kNvme), 0);

  // Two reductions left in flight: u3's, u2's and u1's staging at the backward of u1.
  Config more = c;
  more.communication.max_inflight_reductions = 2;
  EXPECT_EQ(plan_memory(more, 2, four_units(), kDevice, "nccl").peak_at(Place::kDevice),
            36090 + 4020 + 200 + 20 + 3 * 4000);
  // No prefetch: one unit gathered at a time.
  Config none = c;
  none.zero_optimization.stage3_prefetch_bucket_size = 0;
  EXPECT_EQ(plan_memory(none, 2, four_units(), kDevice, "nccl").peak_at(Place::kDevice),
            36090 + 2020 + 300 + 20 + 8000);
  // DeepSpeed's default reuse distance (1e9 elements) keeps every unit from its forward to its
  // backward: at the backward of u2, u0-u2 are still gathered (3 x 2000) with the root.
  Config kept = c;
  kept.zero_optimization.stage3_max_reuse_distance = ZeroConfig().stage3_max_reuse_distance;
  const MemoryPlan k = plan_memory(kept, 2, four_units(), kDevice, "nccl");
  EXPECT_EQ(k.peak_at(Place::kDevice), 36090 + 6020 + 300 + 20 + 8000) << k.device_peak_at;
  EXPECT_EQ(k.device_peak_at, "backward of u2");
  EXPECT_EQ(part(k, Place::kDevice, "stage-3 units gathered"), 6020);
  // A distance that only the last unit's reuse fits in (2 x 10 elements of the root before it,
  // 2 x 1010 before u2's): u3 stays, and the peak is where releasing each unit puts it.
  kept.zero_optimization.stage3_max_reuse_distance = 2000;
  EXPECT_EQ(plan_memory(kept, 2, four_units(), kDevice, "nccl").peak_at(Place::kDevice),
            36090 + 12340);
  // A host backend stages each reduction in host memory: input, slice, and gloo's copy.
  EXPECT_EQ(plan_memory(c, 2, four_units(), kDevice, "gloo").peak_at(Place::kHost),
            4 * (1000 + 500) + 4 * 1000);
}

// Offloading the optimizer moves master and Adam state off the device: the master pinned, the
// state in pageable memory, with the fp32 gradient and 16-bit parameter slots pinned; on NVMe
// the two live in page-rounded chunk files and buffer_count buffers of the largest chunk.
TEST(MemoryPlan, OffloadMovesTheStatesWhereEachTierKeepsThem) {
  const std::string base =
      "bf16: {enabled: true}\noptimizer: {type: AdamW}\n"
      "zero_optimization: {stage: 2, offload_optimizer: {device: ";
  const MemoryPlan cpu = plan_memory(with(base + "cpu}}"), 2, four_units(), kDevice, "nccl");
  EXPECT_EQ(part(cpu, Place::kPinned, "fp32 master (offload_optimizer cpu)"), 8020);
  EXPECT_EQ(part(cpu, Place::kHost, "optimizer state (offload_optimizer cpu)"), 16040);
  EXPECT_EQ(cpu.peak_at(Place::kPinned), 8020 + 8020 + 4010);
  EXPECT_EQ(part(cpu, Place::kDevice, "optimizer state"), 0);
  const MemoryPlan nvme = plan_memory(with(base + "nvme, nvme_path: /x, buffer_count: 2}}"), 2,
                                      four_units(), kDevice, "nccl");
  // Per flat buffer one chunk: master, exp_avg, exp_avg_sq of 500 (or 5) elements, each a page.
  EXPECT_EQ(nvme.peak_at(Place::kNvme), 5 * 3 * 4096);
  EXPECT_EQ(part(nvme, Place::kHost, "offload_optimizer swap buffers"), 2 * 3 * 4096);
  EXPECT_EQ(nvme.peak_at(Place::kPinned), 0);
}

// On a CPU model everything is host memory, a gradient slice exists only from its first
// reduction to the step, and gloo's reduce-scatter holds a copy of its input while in flight.
TEST(MemoryPlan, ACpuModelIsAllHostMemory) {
  const Config c = with(
      "bf16: {enabled: true}\noptimizer: {type: AdamW}\n"
      "zero_optimization: {stage: 2}");
  const MemoryPlan p = plan_memory(c, 2, four_units(), c10::Device(c10::kCPU), "gloo");
  EXPECT_EQ(p.peak_at(Place::kDevice), 0);
  EXPECT_EQ(p.peak_at(Place::kPinned), 0);
  // The peak is u0's backward, with u3's, u2's and u1's reductions in flight (gloo's copy of
  // each whole fp32 buffer) and their slices held.
  EXPECT_EQ(part(p, Place::kHost, "gradient reductions in flight"), 3 * 4 * 1000);
  EXPECT_EQ(part(p, Place::kHost, "gradient slices"), 3 * 4 * 500);
  EXPECT_EQ(part(p, Place::kHost, "fp32 master"), 8020);
}

// A CPU model with the optimizer on NVMe keeps its reduced gradient slices in the chunk files
// too (core/zero/grad_spill.h): each file gains a page of gradient, each swap buffer with it, two
// staging buffers of at most one page here are added, and host memory holds a slice only while
// its reduction is in flight (the others are written), not all four to the step.
TEST(MemoryPlan, ACpuModelSpillsItsGradientsBesideTheNvmeOptimizer) {
  const std::string base =
      "bf16: {enabled: true}\noptimizer: {type: AdamW}\n"
      "zero_optimization: {stage: 2, offload_optimizer: {device: ";
  const MemoryPlan cpu =
      plan_memory(with(base + "cpu}}"), 2, four_units(), c10::Device(c10::kCPU), "gloo");
  const MemoryPlan nvme = plan_memory(with(base + "nvme, nvme_path: /x, buffer_count: 2}}"), 2,
                                      four_units(), c10::Device(c10::kCPU), "gloo");
  EXPECT_EQ(part(nvme, Place::kNvme, "gradient slices (offload_optimizer nvme)"), 5 * 4096);
  EXPECT_EQ(nvme.peak_at(Place::kNvme), 5 * 4 * 4096);
  EXPECT_EQ(part(nvme, Place::kHost, "offload_optimizer swap buffers"), 2 * 4 * 4096);
  EXPECT_EQ(part(nvme, Place::kHost, "gradient spill staging buffers"), 2 * 4096);
  // At the peak (u0's backward): with max_inflight_reductions' default (4) the slices of u3-u1
  // are all still in flight, as CPU offload holds them; with one reduction in flight the spill
  // holds u1's alone, CPU offload still all three.
  EXPECT_EQ(part(cpu, Place::kHost, "gradient slices"), 3 * 4 * 500);
  EXPECT_EQ(part(nvme, Place::kHost, "gradient slices"), 3 * 4 * 500);
  const std::string one = "\ncommunication: {max_inflight_reductions: 1}";
  const MemoryPlan nvme1 = plan_memory(with(base + "nvme, nvme_path: /x, buffer_count: 2}}" + one),
                                       2, four_units(), c10::Device(c10::kCPU), "gloo");
  const MemoryPlan cpu1 =
      plan_memory(with(base + "cpu}}" + one), 2, four_units(), c10::Device(c10::kCPU), "gloo");
  EXPECT_EQ(part(nvme1, Place::kHost, "gradient slices"), 4 * 500);
  EXPECT_EQ(part(cpu1, Place::kHost, "gradient slices"), 3 * 4 * 500);
}

// Under a tensor or expert split each rank's model is its own part, and ZeRO shards it over the
// ranks holding the same part (world / tp, world / ep): 2 ranks split in two plan as one process
// holding that part, 4 ranks as 2 data-parallel ones.
TEST(MemoryPlan, TensorAndExpertSplitsShardOverTheRanksHoldingTheSamePart) {
  const std::string base =
      "bf16: {enabled: true}\noptimizer: {type: AdamW}\n"
      "zero_optimization: {stage: 3, stage3_prefetch_bucket_size: 1000, "
      "stage3_param_persistence_threshold: 0}\n";
  ModelMemory m = four_units();
  m.units[1].params[0].split = true;  // the slices or the experts
  for (const std::string split :
       {"tensor_parallel: {autotp_size: 2}", "expert_parallel: {enabled: true, autoep_size: 2}"}) {
    SCOPED_TRACE(split);
    const MemoryPlan one = plan_memory(with(base, 1), 1, m, kDevice, "nccl");
    const MemoryPlan two = plan_memory(with(base), 2, m, kDevice, "nccl");
    const MemoryPlan split2 = plan_memory(with(base + split), 2, m, kDevice, "nccl");
    const MemoryPlan split4 = plan_memory(with(base + split, 4), 4, m, kDevice, "nccl");
    EXPECT_EQ(split2.peak_at(Place::kDevice), one.peak_at(Place::kDevice));
    EXPECT_EQ(split4.peak_at(Place::kDevice), two.peak_at(Place::kDevice));
    EXPECT_EQ(part(split2, Place::kDevice, "parameter shards"), 4010 * 2);
    EXPECT_EQ(part(split4, Place::kDevice, "parameter shards"), 4010);
  }
}

// Under expert parallelism the replicated parameters saw other tokens on each rank of the expert
// group: at the step their owned gradient ranges are packed and summed over it
// (ShardedStep::reduce_replicated_over_split). Eight units of 1000 and a root of 10, u1 the
// experts: the replicated are 7010 fp32 elements on one ZeRO rank, 28040 bytes on the device;
// beside a host backend the pack is staged through as many bytes of host memory. Persistent per
// rank: bf16 parameters 2 x 8010, fp32 gradients and master 4 x 8010 each, Adam 8 x 8010: 144180.
// One reduction in flight keeps the backward's staging (and its host copies, 2 x 12000 with
// gloo) below the sum, so the sum is each place's peak.
TEST(MemoryPlan, ExpertGroupsSumTheReplicatedGradientsAtTheStep) {
  ModelMemory m;
  for (int i = 0; i < 8; ++i) {
    m.units.push_back({"u" + std::to_string(i), {{"u" + std::to_string(i) + ".w", 1000}}, 0, {}});
  }
  m.units.push_back({"root", {{"emb.weight", 10}}, 0, {}});
  m.units[1].params[0].split = true;
  const std::string c =
      "bf16: {enabled: true}\noptimizer: {type: AdamW}\nzero_optimization: {stage: 2}\n"
      "communication: {max_inflight_reductions: 1}\n"
      "expert_parallel: {enabled: true, autoep_size: 2}";
  const std::string sum = "replicated gradients summed over the expert group";
  const MemoryPlan nccl = plan_memory(with(c), 2, m, kDevice, "nccl");
  EXPECT_EQ(nccl.device_peak_at, "the expert groups' sum of the replicated gradients");
  EXPECT_EQ(part(nccl, Place::kDevice, sum), 4 * 7010);
  EXPECT_EQ(nccl.peak_at(Place::kDevice), 144180 + 4 * 7010);
  EXPECT_EQ(nccl.peak_at(Place::kHost), 0);
  const MemoryPlan gloo = plan_memory(with(c), 2, m, kDevice, "gloo");
  EXPECT_EQ(gloo.peak_at(Place::kDevice), nccl.peak_at(Place::kDevice));
  EXPECT_EQ(gloo.peak_at(Place::kHost), 4 * 7010);
  EXPECT_EQ(part(gloo, Place::kHost, sum + " (host copy)"), 4 * 7010);
  // On 4 ranks each ZeRO world has 2: a rank owns half of every unit (500 elements) and 5 of the
  // root, 7 x 500 + 5 replicated.
  const MemoryPlan four = plan_memory(with(c, 4), 4, m, kDevice, "nccl");
  EXPECT_EQ(part(four, Place::kDevice, sum), 4 * 3505);
  // Without the split nothing is summed again.
  const MemoryPlan none = plan_memory(
      with("bf16: {enabled: true}\noptimizer: {type: AdamW}\nzero_optimization: {stage: 2}", 1), 1,
      m, kDevice, "nccl");
  EXPECT_EQ(part(none, Place::kDevice, sum), 0);
  EXPECT_LT(none.peak_at(Place::kDevice), nccl.peak_at(Place::kDevice));
}

// A routed unit (a layer's experts) is gathered within the layer it follows and never
// prefetched: l0 (1000), its experts (2000), l1 (1000), its experts (2000), a root of 10; stage 3
// on one rank, bf16, the optimizer on the host. Persistent on the device: 16-bit shards
// 2 x 6010, fp32 gradients 4 x 6010: 36060. Without prefetch the peak is l0's backward: the root,
// l0 and its experts gathered (2 x 3010 = 6020), the root's 16-bit gradients (20), the staging of
// l0's experts and of l1's buckets still in flight (4 x 2000 + 4 x 1000). With a prefetch budget of
// one unit, the forward of l0 (given transients that make it the peak) gathers l1 ahead, past
// l0's experts, which spend none of the budget: 2 x 4010.
TEST(MemoryPlan, RoutedUnitsAreGatheredInTheirLayerAndNeverPrefetched) {
  ModelMemory m;
  for (const std::string l : {"l0", "l1"}) {
    m.units.push_back({l, {{l + ".w", 1000}}, 0, {}});
    m.units.push_back({l + ".experts", {{l + ".experts.w", 2000}}, 0, {}});
    m.units.back().routed = true;
  }
  m.units.push_back({"root", {{"emb.weight", 10}}, 0, {}});
  const std::string base =
      "bf16: {enabled: true}\noptimizer: {type: AdamW}\n"
      "communication: {max_inflight_reductions: 1}\n"
      "zero_optimization: {stage: 3, stage3_param_persistence_threshold: 0, "
      "offload_optimizer: {device: cpu}, stage3_prefetch_bucket_size: ";
  const MemoryPlan none = plan_memory(with(base + "0}", 1), 1, m, kDevice, "nccl");
  EXPECT_EQ(none.device_peak_at, "backward of l0");
  EXPECT_EQ(part(none, Place::kDevice, "stage-3 units gathered"), 6020);
  EXPECT_EQ(none.peak_at(Place::kDevice), 36060 + 6020 + 20 + 4 * 3000);
  m.units[0].activations.forward_extra = 100000;
  const MemoryPlan ahead = plan_memory(with(base + "1000}", 1), 1, m, kDevice, "nccl");
  EXPECT_EQ(ahead.device_peak_at, "forward of l0");
  EXPECT_EQ(part(ahead, Place::kDevice, "stage-3 units gathered"), 2 * 4010);
}

// Under sequence parallelism gradients are reduced in seq_parallel_communication_data_type, fp32
// unless given, whatever communication_data_type says (DeepSpeed's engine replaces it).
TEST(MemoryPlan, SequenceParallelReducesInItsOwnDtype) {
  const std::string base =
      "bf16: {enabled: true}\noptimizer: {type: AdamW}\nzero_optimization: {stage: 2}\n";
  const auto device_peak = [&](const std::string& extra) {
    return plan_memory(with(base + extra), 2, four_units(), kDevice, "nccl")
        .peak_at(Place::kDevice);
  };
  const int64_t fp32 = device_peak("communication_data_type: fp32");
  const int64_t bf16 = device_peak("communication_data_type: bf16");
  EXPECT_NE(fp32, bf16);
  EXPECT_EQ(device_peak("sequence_parallel_size: 2\ncommunication_data_type: bf16"), fp32);
  EXPECT_EQ(device_peak("sequence_parallel_size: 2\nseq_parallel_communication_data_type: bf16"),
            bf16);
}

}  // namespace
}  // namespace zt::plan
