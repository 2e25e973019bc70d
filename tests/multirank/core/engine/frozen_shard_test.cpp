// Frozen parameters at stage 3 under real processes (mpirun -np 1..4), on a LoRA-shaped model:
// every block holds a frozen base matrix and a trainable low-rank pair, and the root a frozen
// input layer.
//
// FrozenShards: the frozen parameters are sharded like the trainable ones (about 1/N of their
// bytes per rank), and training equals single-process torch AdamW on the trainable parameters
// (fp32, with and without accumulation, with offload_param cpu and nvme, the frozen shards in
// files too) while the frozen ones stay bit for bit; in bf16 it equals stage 0. In backward a
// block's frozen shard is released once backward reaches the block before it, so at most the root
// and one block are gathered. A checkpoint resumes bit for bit (also with the shards on NVMe). At
// 4 ranks hpZ is bit for bit plain stage 3 and MiCS within tolerance.
//
// QuantizedFrozen (zero_quantized_nontrainable_weights): the frozen shards are int8 blocks and
// scales, a little over a quarter of fp32's bytes; the weights the model computes with are within
// half a quantization step of the originals; training stays within 1% of the exact run's losses;
// a checkpoint resumes bit for bit (the quantized shards come back identical), and hpZ's int8
// secondary copy gathers the same values.
//
// Tolerance: fp32 rtol 1e-5, atol 2e-6, as the engine equivalence test (the reduction order across
// ranks moves gradients by a few ulps). bf16: 1e-2 relative (two bf16 ulps of the same masters).

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/checkpoint/checkpoint.h"
#include "core/engine.h"
#include "core/zero/call_unit.h"
#include "parallel/dist.h"
#include "tests/support/mpi_world.h"

namespace {

std::shared_ptr<zt::dist::Communicator>& g_comm = zt::testing::mpi_world();

constexpr int64_t kGlobalBatch = 36;  // divisible by world * accumulation for 1..4 x {1, 3}
constexpr int kSteps = 5;
constexpr double kRtol = 1e-5, kAtol = 2e-6;
constexpr double kLr = 1e-2, kWd = 0.01;

// A block as LoRA fine-tuning leaves it: y = x + gelu(base(x) + b(a(x))), base frozen.
struct LoraBlockImpl : torch::nn::Module {
  static constexpr int64_t kWidth = 24, kRank = 3;
  LoraBlockImpl() {
    base = register_module("base", torch::nn::Linear(kWidth, kWidth));
    a = register_module("a",
                        torch::nn::Linear(torch::nn::LinearOptions(kWidth, kRank).bias(false)));
    b = register_module("b",
                        torch::nn::Linear(torch::nn::LinearOptions(kRank, kWidth).bias(false)));
    for (auto& p : base->parameters()) p.set_requires_grad(false);
  }
  torch::Tensor forward(torch::Tensor x) {
    return x + torch::gelu(base->forward(x) + b->forward(a->forward(x)));
  }
  torch::nn::Linear base{nullptr}, a{nullptr}, b{nullptr};
};
TORCH_MODULE(LoraBlock);

struct LoraStackImpl : torch::nn::Module {
  static constexpr int64_t kIn = 7, kBlocks = 4, kOut = 3;
  LoraStackImpl() {
    input = register_module("input", torch::nn::Linear(kIn, kIn));
    embed = register_module("embed", torch::nn::Linear(kIn, LoraBlockImpl::kWidth));
    for (int64_t i = 0; i < kBlocks; ++i)
      blocks.push_back(register_module("block" + std::to_string(i), LoraBlock()));
    head = register_module("head", torch::nn::Linear(LoraBlockImpl::kWidth, kOut));
    for (auto& p : input->parameters()) p.set_requires_grad(false);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = embed->forward(input->forward(x));
    for (auto& block : blocks) x = zt::call_unit(*block, x);
    return head->forward(x);
  }
  torch::nn::Linear input{nullptr}, embed{nullptr}, head{nullptr};
  std::vector<LoraBlock> blocks;
};
TORCH_MODULE(LoraStack);

std::vector<std::string> unit_names() {
  std::vector<std::string> names;
  for (int64_t i = 0; i < LoraStackImpl::kBlocks; ++i) names.push_back("block" + std::to_string(i));
  return names;
}

LoraStack make_model() {
  torch::manual_seed(4321);
  return LoraStack();
}

std::pair<torch::Tensor, torch::Tensor> global_batch(int step) {
  torch::manual_seed(200 + step);
  return {torch::randn({kGlobalBatch, LoraStackImpl::kIn}), torch::randn({kGlobalBatch, 3})};
}

struct Trace {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> params;
  zt::MemoryReport memory;
};

// Single-process torch AdamW over the trainable parameters.
Trace reference() {
  LoraStack model = make_model();
  std::vector<torch::Tensor> trainable;
  for (auto& p : model->parameters())
    if (p.requires_grad()) trainable.push_back(p);
  torch::optim::AdamW opt(trainable, torch::optim::AdamWOptions(kLr).weight_decay(kWd));
  Trace t;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = global_batch(s);
    opt.zero_grad();
    torch::Tensor loss = torch::mse_loss(model->forward(x), y);
    loss.backward();
    opt.step();
    t.losses.push_back(loss.item<double>());
  }
  for (auto& p : model->named_parameters()) t.params[p.key()] = p.value().detach().clone();
  return t;
}

zt::EngineOptions options(int stage = 3) {
  zt::EngineOptions o;
  o.stage = stage;
  o.stage3_param_persistence_threshold = 0;  // shard every buffer, however small
  o.reduce_bucket_size = 1000;               // one trainable and one frozen buffer per block
  o.stage3_prefetch_bucket_size = 2000;
  o.optimizer.type = zt::optim::OptimizerKind::kAdamW;
  o.hyper.lr = kLr;
  o.hyper.weight_decay = kWd;
  o.param_groups.no_decay_patterns.clear();  // the reference decays every trainable parameter
  o.units = unit_names();
  return o;
}

void train(zt::Engine& engine, LoraStackImpl& m, int first, int last, Trace& t) {
  const int world = g_comm->size(), rank = g_comm->rank();
  const int accumulation = engine.options().gradient_accumulation_steps;
  const int64_t micro = kGlobalBatch / (world * accumulation);
  const at::ScalarType dtype = engine.options().compute_dtype;
  for (int s = first; s < last; ++s) {
    auto [x, y] = global_batch(s);
    double loss_sum = 0;
    for (int a = 0; a < accumulation; ++a) {
      const int64_t begin = (static_cast<int64_t>(a) * world + rank) * micro;
      torch::Tensor xs = x.narrow(0, begin, micro).to(dtype), ys = y.narrow(0, begin, micro);
      torch::Tensor loss =
          engine.forward([&] { return torch::mse_loss(m.forward(xs).to(torch::kFloat), ys); });
      engine.backward(loss);
      engine.step();
      loss_sum += loss.item<double>();
    }
    torch::Tensor l = torch::full({1}, loss_sum, torch::kDouble);
    g_comm->all_reduce(l)->wait();
    t.losses.push_back(l.item<double>() / (world * accumulation));
  }
}

void snapshot(zt::Engine& engine, LoraStackImpl& m, Trace& t) {
  t.memory = engine.memory();
  zt::Engine::GatheredParameters full(engine);
  for (auto& p : m.named_parameters())
    t.params[p.key()] = p.value().detach().to(torch::kFloat).clone();
}

Trace run(const zt::EngineOptions& o) {
  LoraStack m = make_model();
  zt::Engine engine(m.ptr(), o, g_comm);
  Trace t;
  train(engine, *m, 0, kSteps, t);
  snapshot(engine, *m, t);
  return t;
}

void expect_close(const Trace& got, const Trace& want, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t s = 0; s < got.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], rtol * std::abs(want.losses[s]) + 1e-7)
        << what << ": loss of step " << s;
  }
  for (const auto& [name, w] : want.params) {
    const torch::Tensor& g = got.params.at(name);
    EXPECT_TRUE(torch::allclose(g, w, rtol, atol))
        << what << ": parameter " << name << " differs by up to "
        << (g - w).abs().max().item<double>();
  }
}

void expect_identical(const Trace& got, const Trace& want, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t s = 0; s < got.losses.size(); ++s)
    EXPECT_EQ(got.losses[s], want.losses[s]) << what << ": loss of step " << s;
  for (const auto& [name, w] : want.params)
    EXPECT_TRUE(torch::equal(got.params.at(name), w)) << what << ": parameter " << name;
}

// Elements and bytes of the model's frozen parameters, in fp32.
int64_t frozen_fp32_bytes() {
  LoraStack m = make_model();
  int64_t n = 0;
  for (auto& p : m->parameters())
    if (!p.requires_grad()) n += p.numel();
  return 4 * n;
}

// The frozen parameters as built.
std::map<std::string, torch::Tensor> frozen_at_start() {
  LoraStack m = make_model();
  std::map<std::string, torch::Tensor> out;
  for (auto& p : m->named_parameters())
    if (!p.value().requires_grad()) out[p.key()] = p.value().detach().clone();
  return out;
}

std::string scratch(const std::string& name) {
  const std::string d = std::string(ZT_BINARY_DIR) + "/test_scratch/frozen/" + name;
  if (g_comm->rank() == 0) {
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
  }
  g_comm->barrier()->wait();
  return d;
}

TEST(FrozenShards, TrainLikeSingleProcessAdamW) {
  const Trace want = reference();
  const auto frozen = frozen_at_start();
  // Blocks kept gathered from forward to backward (the default reuse distance), and released
  // after their forward (0).
  for (int64_t reuse : {int64_t{1'000'000'000}, int64_t{0}}) {
    for (int accumulation : {1, 3}) {
      for (zt::OffloadDevice offload :
           {zt::OffloadDevice::kNone, zt::OffloadDevice::kCpu, zt::OffloadDevice::kNvme}) {
        zt::EngineOptions o = options();
        o.stage3_max_reuse_distance = reuse;
        o.gradient_accumulation_steps = accumulation;
        o.offload_param.device = offload;
        if (offload == zt::OffloadDevice::kNvme) {
          o.offload_param.nvme_path =
              scratch("nvme" + std::to_string(accumulation) + "r" + std::to_string(reuse));
          o.offload_param.max_in_cpu = 0;  // every shard in a file, the frozen ones included
        }
        const std::string what = "reuse " + std::to_string(reuse) + " x" +
                                 std::to_string(accumulation) +
                                 (offload == zt::OffloadDevice::kCpu    ? " offload_param cpu"
                                  : offload == zt::OffloadDevice::kNvme ? " offload_param nvme"
                                                                        : "") +
                                 " at " + std::to_string(g_comm->size()) + " ranks";
        const Trace got = run(o);
        expect_close(got, want, kRtol, kAtol, what);
        for (const auto& [name, before] : frozen)
          EXPECT_TRUE(torch::equal(got.params.at(name), before))
              << what << ": " << name << " moved";
        if (offload == zt::OffloadDevice::kNvme) {
          EXPECT_EQ(got.memory.frozen_param_bytes, 0) << what << ": frozen shards left in memory";
          EXPECT_GE(got.memory.nvme_bytes, frozen_fp32_bytes() / g_comm->size()) << what;
        }
      }
    }
  }
}

TEST(FrozenShards, Bf16TrainsLikeStageZero) {
  zt::EngineOptions o = options(0);
  o.compute_dtype = at::kBFloat16;
  const Trace want = run(o);
  o.stage = 3;
  expect_close(run(o), want, 1e-2, 1e-3, "bf16 stage 3 against stage 0");
}

// About 1/N of the frozen bytes per rank (each buffer padded to a multiple of N elements), and at
// most the root and one block gathered at any time with prefetching off and every block released
// after its forward (stage3_max_reuse_distance 0): in backward a block's frozen buffer goes when
// backward reaches the block before it. At DeepSpeed's default reuse distance (1e9 elements) every
// block is used again well within it, so all of them stay gathered from forward to backward, and
// backward releases them all.
TEST(FrozenShards, ShardedAndReleasedInBackward) {
  const int world = g_comm->size();
  zt::EngineOptions o = options();
  o.stage3_prefetch_bucket_size = 0;
  o.stage3_max_reuse_distance = 0;
  const Trace t = run(o);
  const int64_t whole = frozen_fp32_bytes();
  const int64_t slack = 4 * world * (LoraStackImpl::kBlocks + 1);  // padding: one buffer per unit
  EXPECT_GE(t.memory.frozen_param_bytes, whole / world);
  EXPECT_LE(t.memory.frozen_param_bytes, whole / world + slack);
  LoraStack m = make_model();
  auto numel = [](torch::nn::Module& mod) {
    int64_t n = 0;
    for (auto& p : mod.parameters()) n += p.numel();
    return n;
  };
  const int64_t root = numel(*m->input) + numel(*m->embed) + numel(*m->head);
  const int64_t block = numel(*m->blocks[0]);
  // Buffers: the root's trainable and frozen one, a block's trainable and frozen one, each padded.
  const int64_t bound = 4 * (root + block) + 4 * 4 * world;
  EXPECT_LE(t.memory.peak_gathered_param_bytes, bound)
      << "more than the root and one block gathered at once";
  EXPECT_GE(t.memory.peak_gathered_param_bytes, 4 * (root + block));

  o.stage3_max_reuse_distance = zt::EngineOptions().stage3_max_reuse_distance;
  const Trace kept = run(o);
  const int64_t all = root + LoraStackImpl::kBlocks * block;
  EXPECT_GE(kept.memory.peak_gathered_param_bytes, 4 * all) << "a block released before backward";
  EXPECT_LE(kept.memory.peak_gathered_param_bytes, 4 * all + slack * 2);
  EXPECT_EQ(kept.memory.gathered_param_bytes, 0) << "backward left blocks gathered";
}

TEST(FrozenShards, CheckpointResumesBitForBit) {
  for (const std::string variant : {"exact", "quantized", "nvme"}) {
    zt::EngineOptions o = options();
    o.zero_quantized_nontrainable_weights = variant == "quantized";
    if (variant == "nvme") {
      o.offload_param.device = zt::OffloadDevice::kNvme;
      o.offload_param.nvme_path = scratch("resume_swap");
      o.offload_param.max_in_cpu = 0;
    }
    const std::string dir = scratch(variant);
    Trace whole;
    {
      LoraStack m = make_model();
      zt::Engine engine(m.ptr(), o, g_comm);
      train(engine, *m, 0, 2, whole);
      zt::save_checkpoint(engine, dir, "step2", {});
      train(engine, *m, 2, kSteps, whole);
      snapshot(engine, *m, whole);
    }
    Trace resumed;
    {
      torch::manual_seed(99);  // other initial values: the checkpoint must replace all of them
      LoraStack m;
      zt::Engine engine(m.ptr(), o, g_comm);
      zt::load_checkpoint(engine, dir);
      train(engine, *m, 2, kSteps, resumed);
      snapshot(engine, *m, resumed);
    }
    whole.losses.erase(whole.losses.begin(), whole.losses.begin() + 2);
    expect_identical(resumed, whole, variant + " frozen shards");
  }
}

TEST(FrozenShards, HpzAndMicsAtFourRanks) {
  if (g_comm->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  const Trace plain = run(options());
  zt::EngineOptions hpz = options();
  hpz.zero_hpz_partition_size = 2;
  const Trace h = run(hpz);
  expect_identical(h, plain, "hpZ 2");
  EXPECT_GT(h.memory.frozen_param_bytes, plain.memory.frozen_param_bytes)
      << "no secondary copy of the frozen buffers";
  zt::EngineOptions mics = options();
  mics.mics_shard_size = 2;
  const Trace g = run(mics);
  expect_close(g, plain, kRtol, kAtol, "mics_shard_size 2");
  EXPECT_NEAR(static_cast<double>(g.memory.frozen_param_bytes),
              2.0 * static_cast<double>(plain.memory.frozen_param_bytes), 4.0 * 4 * 5);
}

TEST(QuantizedFrozen, Int8ShardsWithinBound) {
  zt::EngineOptions o = options();
  const Trace exact = run(o);
  o.zero_quantized_nontrainable_weights = true;
  LoraStack m = make_model();
  const auto frozen = frozen_at_start();
  zt::Engine engine(m.ptr(), o, g_comm);
  {
    // What the model computes with: within half a quantization step (max |x| / 254 of its block,
    // at most that of its whole unit's buffer) of the values built, and not all of them equal.
    zt::Engine::GatheredParameters full(engine);
    std::map<std::string, double> unit_max;
    for (const auto& [name, before] : frozen) {
      const std::string unit = name.substr(0, name.find('.'));
      unit_max[unit] = std::max(unit_max[unit], before.abs().max().item<double>());
    }
    bool any_moved = false;
    for (auto& p : m->named_parameters()) {
      auto it = frozen.find(p.key());
      if (it == frozen.end()) continue;
      const double step = unit_max[p.key().substr(0, p.key().find('.'))] / 127.0;
      const double err = (p.value().detach() - it->second).abs().max().item<double>();
      EXPECT_LE(err, step / 2 * (1 + 1e-5)) << p.key();
      any_moved = any_moved || err > 0;
    }
    EXPECT_TRUE(any_moved) << "no frozen value was quantized";
  }
  Trace q;
  train(engine, *m, 0, kSteps, q);
  snapshot(engine, *m, q);
  // int8 values and one fp32 scale per block (a buffer this small is one block a shard).
  EXPECT_LE(q.memory.frozen_param_bytes, exact.memory.frozen_param_bytes / 4 + 4 * 5 * 2)
      << "the frozen shards are not int8";
  for (size_t s = 0; s < q.losses.size(); ++s)
    EXPECT_NEAR(q.losses[s], exact.losses[s], 1e-2 * std::abs(exact.losses[s])) << "step " << s;
}

TEST(QuantizedFrozen, HpzSecondaryCopyIsInt8) {
  if (g_comm->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  zt::EngineOptions o = options();
  o.zero_quantized_nontrainable_weights = true;
  const Trace plain = run(o);
  o.zero_hpz_partition_size = 2;
  const Trace h = run(o);
  expect_identical(h, plain, "quantized frozen shards with hpZ 2");
  // The secondary copy holds 2 of the 4 shards' blocks: twice the primary's bytes more, not fp32.
  EXPECT_LE(h.memory.frozen_param_bytes, 3 * plain.memory.frozen_param_bytes + 64);
  EXPECT_GT(h.memory.frozen_param_bytes, plain.memory.frozen_param_bytes);
}

}  // namespace
