// Partitioned construction (core/zero/partitioned_init.h, docs/DESIGN.md): a model built unit by
// unit, each rank keeping only its slices, holds bit for bit the values of a plain construction
// with the same seed, trains bit-identically at stage 3, checkpoints and consolidates, and never
// holds more than the largest unit plus this rank's shards while it is built. Run under
// mpirun -np 1, 2 and 3 (real processes); every rank builds the plain model itself as reference.

#include "core/zero/partitioned_init.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/error.h"
#include "core/checkpoint/checkpoint.h"
#include "core/engine.h"
#include "tests/multirank/core/engine/test_models.h"
#include "tests/support/full_parameters.h"
#include "tests/support/mpi_world.h"
#include "train/cpu_memory_meter.h"

namespace {

namespace fs = std::filesystem;
using zt::testing::expect_identical;
using zt::testing::full_parameters;
using zt::zero::PartitionedInit;

std::shared_ptr<zt::dist::Communicator>& g_comm = zt::testing::mpi_world();

constexpr int64_t kReduceBucket = 700;  // several buckets per block, each padded
constexpr int64_t kPersistence = 40;    // ln_f and the layer norms' small buckets stay whole

// A frozen input layer, an embedding and a head (the root, built first, as the GPT example
// does), then `n` transformer blocks, each one stage-3 unit handed to `parts` once built.
struct StackImpl : torch::nn::Module {
  StackImpl(int64_t width, int n, PartitionedInit* parts) {
    frozen = register_module("frozen", torch::nn::Linear(5, 5));
    for (auto& p : frozen->parameters()) p.set_requires_grad(false);
    embed = register_module("embed", torch::nn::Linear(5, width));
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
    head = register_module("head", torch::nn::Linear(width, 3));
    blocks = register_module("blocks", torch::nn::ModuleList());
    if (parts) parts->add_root(*this);
    for (int i = 0; i < n; ++i) {
      zt::testing::Block b(width, 2);
      blocks->push_back(b);
      if (parts) parts->add_unit("blocks." + std::to_string(i), *b);
    }
  }
  // x (B, T, 5) -> (B, 3)
  torch::Tensor forward(torch::Tensor x) {
    x = embed->forward(frozen->forward(x));
    for (const auto& b : *blocks) x = zt::call_unit(*b->as<zt::testing::BlockImpl>(), x);
    return head->forward(ln_f->forward(x).mean(1));
  }
  std::vector<std::string> units() const {
    std::vector<std::string> u;
    for (size_t i = 0; i < blocks->size(); ++i) u.push_back("blocks." + std::to_string(i));
    return u;
  }
  torch::nn::Linear frozen{nullptr}, embed{nullptr}, head{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::ModuleList blocks{nullptr};
};
TORCH_MODULE(Stack);

zt::zero::PartitionOptions partition_options() {
  return {.rank = g_comm->rank(),
          .world = g_comm->size(),
          .reduce_bucket_size = kReduceBucket,
          .persistence_threshold = kPersistence};
}

zt::EngineOptions engine_options(const Stack& m, at::ScalarType dtype) {
  zt::EngineOptions o;
  o.stage = 3;
  o.units = m->units();
  o.reduce_bucket_size = kReduceBucket;
  o.stage3_param_persistence_threshold = kPersistence;
  o.stage3_prefetch_bucket_size = 1000;
  o.compute_dtype = dtype;
  o.optimizer.type = zt::optim::OptimizerKind::kAdamW;
  o.hyper.lr = 1e-2;
  o.hyper.weight_decay = 0.01;
  return o;
}

// A model and its engine, built plain (whole, broadcast from rank 0) or partitioned.
struct Built {
  Stack model{nullptr};
  std::unique_ptr<zt::Engine> engine;
};

Built build(bool partitioned, at::ScalarType dtype = at::kFloat, int64_t width = 12) {
  torch::manual_seed(4321);
  auto parts = partitioned ? std::make_shared<PartitionedInit>(partition_options()) : nullptr;
  Built b;
  b.model = Stack(width, 3, parts.get());
  b.engine =
      std::make_unique<zt::Engine>(b.model.ptr(), engine_options(b.model, dtype), g_comm, parts);
  return b;
}

// Same data on every rank's reference; each rank takes its own slice of the global batch.
std::vector<double> train(Built& b, int steps, at::ScalarType dtype = at::kFloat) {
  std::vector<double> losses;
  const int r = g_comm->rank(), n = g_comm->size();
  for (int s = 0; s < steps; ++s) {
    torch::manual_seed(100 + s);
    torch::Tensor x = torch::randn({6 * n, 4, 5}), y = torch::randn({6 * n, 3});
    torch::Tensor loss = b.engine->forward([&] {
      return torch::mse_loss(b.model->forward(x.narrow(0, 6 * r, 6).to(dtype)).to(torch::kFloat),
                             y.narrow(0, 6 * r, 6));
    });
    b.engine->backward(loss);
    b.engine->step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

TEST(PartitionedInit, ValuesEqualPlainConstruction) {
  Built plain = build(false), parted = build(true);
  expect_identical(full_parameters(*plain.engine), full_parameters(*parted.engine));
  // The reference without any engine: a plain construction with the same seed.
  torch::manual_seed(4321);
  Stack whole(12, 3, nullptr);
  std::map<std::string, torch::Tensor> expected;
  for (const auto& p : whole->named_parameters()) expected[p.key()] = p.value().detach();
  expect_identical(expected, full_parameters(*parted.engine));
}

TEST(PartitionedInit, TrainsBitIdenticalToPlainPathAtStage3) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    Built plain = build(false, dtype), parted = build(true, dtype);
    const std::vector<double> a = train(plain, 5, dtype), b = train(parted, 5, dtype);
    EXPECT_EQ(a, b);
    expect_identical(full_parameters(*plain.engine), full_parameters(*parted.engine));
    auto sa = plain.engine->shard_states(), sb = parted.engine->shard_states();
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t i = 0; i < sa.size(); ++i) EXPECT_TRUE(torch::equal(sa[i].master, sb[i].master));
  }
}

// With bf16 masters the shards are made in bf16 at construction (PartitionOptions::dtype, as
// zt::initialize does): the same training, bit for bit, as a plain construction with bf16 masters,
// and half the shard bytes held while building.
TEST(PartitionedInit, Bf16MastersBuildBf16ShardsAndTrainAsThePlainPath) {
  auto with_bf16_masters = [](Built& b) {
    zt::EngineOptions o = engine_options(b.model, at::kBFloat16);
    o.master_dtype = at::kBFloat16;
    o.grad_accum_dtype = at::kBFloat16;
    o.optimizer_state_dtype = at::kBFloat16;
    return o;
  };
  Built plain, parted;
  torch::manual_seed(4321);
  plain.model = Stack(12, 3, nullptr);
  plain.engine = std::make_unique<zt::Engine>(plain.model.ptr(), with_bf16_masters(plain), g_comm);
  torch::manual_seed(4321);
  zt::zero::PartitionOptions po = partition_options();
  po.dtype = at::kBFloat16;
  auto parts = std::make_shared<PartitionedInit>(po);
  parted.model = Stack(12, 3, parts.get());
  {
    torch::manual_seed(4321);
    PartitionedInit fp32_parts(partition_options());
    Stack fp32_model(12, 3, &fp32_parts);
    EXPECT_EQ(2 * parts->resident_bytes(), fp32_parts.resident_bytes());
  }
  for (const auto& p : parted.model->named_parameters()) {
    if (p.value().requires_grad()) {
      EXPECT_EQ(p.value().scalar_type(), at::kBFloat16) << p.key();
    }
  }
  parted.engine =
      std::make_unique<zt::Engine>(parted.model.ptr(), with_bf16_masters(parted), g_comm, parts);
  const std::vector<double> a = train(plain, 4, at::kBFloat16), b = train(parted, 4, at::kBFloat16);
  EXPECT_EQ(a, b);
  expect_identical(full_parameters(*plain.engine), full_parameters(*parted.engine));
}

TEST(PartitionedInit, CheckpointRoundTripAndConsolidation) {
  const fs::path dir = fs::path(ZT_BINARY_DIR) / "Testing" / "partitioned_init" / "ckpt";
  if (g_comm->rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  g_comm->barrier()->wait();
  Built trained = build(true);
  train(trained, 2);
  zt::save_checkpoint(*trained.engine, dir.string(), "t");
  const auto expected = full_parameters(*trained.engine);
  Built fresh = build(true);
  zt::load_checkpoint(*fresh.engine, dir.string(), "t");
  expect_identical(expected, full_parameters(*fresh.engine));
  std::map<std::string, torch::Tensor> consolidated;
  zt::for_each_consolidated(
      dir.string(), "t", "master",
      [&](const std::string& n, const at::Tensor& t) { consolidated[n] = t.clone(); });
  expect_identical(expected, consolidated);
  // And training goes on identically from both.
  EXPECT_EQ(train(trained, 2), train(fresh, 2));
}

// Construction memory: counted by LibTorch's CPU allocator (every storage made after install).
// Partitioned, the peak is the largest unit plus this rank's shards, and what stays is the
// shards; a plain construction (whole, then sharded by the engine) holds the whole model, which
// the same bound refuses from two ranks on.
TEST(PartitionedInit, ConstructionMemoryIsLargestUnitPlusShards) {
  using zt::train::CpuMemoryMeter;
  CpuMemoryMeter::install();
  constexpr int64_t kWidth = 96;  // a block: ~110k parameters, 440 KB in fp32
  const int64_t slack = 16 * 1024;
  auto measure = [&](PartitionedInit* parts, int64_t* held) {
    torch::manual_seed(1);
    const int64_t before = CpuMemoryMeter::live_bytes();
    CpuMemoryMeter::reset_peak();
    Stack m(kWidth, 6, parts);
    *held = CpuMemoryMeter::live_bytes() - before;
    return CpuMemoryMeter::peak_bytes() - before;
  };
  PartitionedInit parts(partition_options());
  int64_t held = 0, plain_held = 0;
  const int64_t peak = measure(&parts, &held);
  const int64_t plain_peak = measure(nullptr, &plain_held);
  const int64_t frozen = (5 * 5 + 5) * 4;
  const int64_t bound = parts.largest_unit_bytes() + parts.resident_bytes() + frozen + slack;
  EXPECT_LE(peak, bound) << "largest unit " << parts.largest_unit_bytes() << " B, shards "
                         << parts.resident_bytes() << " B";
  EXPECT_LE(held, parts.resident_bytes() + frozen + slack);
  EXPECT_GE(held, parts.resident_bytes());
  if (g_comm->size() >= 2) {
    EXPECT_GT(plain_peak, bound) << "the bound would not tell the old path apart";
  }
  std::printf("rank %d: construction peak %lld B partitioned (bound %lld B), %lld B whole\n",
              g_comm->rank(), static_cast<long long>(peak), static_cast<long long>(bound),
              static_cast<long long>(plain_peak));
}

// Closed-form values by name and element (what every rank can compute): a source asked for each
// parameter on every rank, with only the ranges this rank holds.
class IndexSource : public zt::zero::ShardWeightSource {
 public:
  static float value(const std::string& name, int64_t k) {
    return static_cast<float>(std::hash<std::string>{}(name) % 1000) + 0.001f * k;
  }
  void fill(const std::string& name, at::IntArrayRef shape, int64_t begin,
            const at::Tensor& dst) override {
    asked.push_back(name);
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    EXPECT_LE(begin + dst.numel(), numel) << name;
    held += dst.numel();
    auto a = dst.accessor<float, 1>();
    for (int64_t i = 0; i < dst.numel(); ++i) a[i] = value(name, begin + i);
  }
  std::vector<std::string> asked;
  int64_t held = 0;  // elements written
};

// load: every trainable parameter's shard slice, a persistent buffer whole and the frozen layer
// whole take the source's values; the engine gathers exactly them.
TEST(PartitionedInit, LoadTakesEveryValueFromTheSource) {
  torch::manual_seed(4321);
  auto parts = std::make_shared<PartitionedInit>(partition_options());
  Stack m(12, 3, parts.get());
  IndexSource source;
  parts->load(source);
  std::vector<std::string> names;
  for (const auto& p : m->named_parameters()) names.push_back(p.key());
  std::vector<std::string> asked = source.asked;
  std::sort(names.begin(), names.end());
  std::sort(asked.begin(), asked.end());
  EXPECT_EQ(asked, names) << "every parameter asked for once, on every rank";
  zt::Engine e(m.ptr(), engine_options(m, at::kFloat), g_comm, parts);
  const auto full = full_parameters(e);
  for (const auto& p : m->named_parameters()) {
    const at::Tensor got = full.count(p.key()) ? full.at(p.key()) : p.value().detach();
    auto flat = got.reshape({-1});
    for (int64_t k = 0; k < flat.numel(); ++k) {
      ASSERT_EQ(flat[k].item<float>(), IndexSource::value(p.key(), k))
          << p.key() << "[" << k << "]";
    }
  }
  // This rank wrote its shards, the persistent buffers and the frozen layer; no more.
  EXPECT_LE(source.held * 4, parts->resident_bytes() + (5 * 5 + 5) * 4);
}

TEST(PartitionedInit, LayoutMismatchIsAnErrorNamingTheSetting) {
  torch::manual_seed(4321);
  zt::zero::PartitionOptions po = partition_options();
  auto parts = std::make_shared<PartitionedInit>(po);
  Stack m(12, 3, parts.get());
  zt::EngineOptions o = engine_options(m, at::kFloat);
  o.reduce_bucket_size = 333;
  try {
    zt::Engine e(m.ptr(), o, g_comm, parts);
    FAIL() << "a bucket size differing from the construction's was accepted";
  } catch (const zt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("reduce_bucket_size 700"), std::string::npos) << e.what();
  }
  // Units the engine does not know: their parameters would land in the root's buffers.
  o = engine_options(m, at::kFloat);
  o.units = {"blocks.0"};
  try {
    zt::Engine e(m.ptr(), o, g_comm, parts);
    FAIL() << "an engine without the construction's units was accepted";
  } catch (const zt::Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("was partitioned at construction into another flat buffer"),
        std::string::npos)
        << e.what();
  }
  o = engine_options(m, at::kFloat);
  o.stage = 2;
  EXPECT_THROW(zt::Engine(m.ptr(), o, g_comm, parts), zt::Error);
}

}  // namespace

namespace {

// A rank that builds other values (another seed) would train a model no rank constructed; the
// engine refuses it before training, on every rank, naming the first unit that differs.
TEST(PartitionedInit, DifferentSeedsOnRanksAreAnError) {
  if (g_comm->size() < 2) GTEST_SKIP() << "needs two ranks to differ";
  torch::manual_seed(4321 + g_comm->rank());
  auto parts = std::make_shared<PartitionedInit>(partition_options());
  Stack m(12, 3, parts.get());
  try {
    zt::Engine e(m.ptr(), engine_options(m, at::kFloat), g_comm, parts);
    FAIL() << "ranks built with different seeds were accepted";
  } catch (const zt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("built with different values on different ranks"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
