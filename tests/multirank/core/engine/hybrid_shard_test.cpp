// Hybrid sharding (zero_optimization.mics_shard_size: DeepSpeed's MiCS, PyTorch's HSDP) against
// plain stage 3 under real processes (mpirun -np 2..4): for every group size that divides the
// world, with and without gradient accumulation, with clipping, in fp32 and bf16, the losses,
// gradient norms and parameters after 5 steps equal plain stage 3 over the same ranks and
// batches; memory per rank follows the group size; checkpoints saved with one group size load
// with another (and into plain stage 3) and continue like the run that never stopped.
//
// ZeRO++ qwZ (zero_optimization.zero_quantized_weights, mpirun -np 2 and 4): every parameter
// gather moves int8 blocks and fp32 scales; the gathered weights are within half a quantization
// step of the exact ones, the gathers move about a quarter of fp32's bytes, and training stays
// within 1% of plain stage 3's losses over 5 steps (alone and with hpZ at 4 ranks).
//
// ZeRO++ qgZ (zero_optimization.zero_quantized_gradients, mpirun -np 4 posing as 2 nodes of 2
// through OpenMPI's local-size variables): the two-hop int8 reduction against the exact sum
// within its bound, and training within 1% of plain stage 3's losses, alone and with hpZ + qwZ.
//
// The hierarchical gradient reduction of stages 0-2 (mpirun -np 4 as 2 nodes of 2): the two-level
// all-reduce and reduce-scatter equal the flat ones, and stages 0, 1, 2 (with accumulation, fp32
// and bf16) train like the flat reduction while no gradient reduction and no publish of the
// updated parameters runs over every rank. MiCS's mics_hierarchical_params_gather (one shard group
// over both nodes): gathers across nodes, then in the node, bit for bit the one-all-gather run.
//
// ZeRO++ hpZ (zero_optimization.zero_hpz_partition_size, mpirun -np 4): the backward's gathers
// read the secondary copy over the hpz group instead of the shards over every rank, which moves
// the same values, so training is bit for bit plain stage 3's; the test counts the gathers on
// the sharding communicator and the secondary copy's bytes.
//
// Tolerance: fp32 rtol 1e-5, atol 2e-6, as the engine equivalence test: the gradient is summed in
// another order (reduce-scatter in the group, then the sum across groups), a few ulps, which
// Adam's normalisation keeps at that relative size after 5 steps. bf16: the 16-bit parameters
// round the same fp32 masters, so 1e-2 relative (two bf16 ulps).

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/error.h"
#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/format.h"
#include "core/engine.h"
#include "core/zero/hierarchical_reduce.h"
#include "core/zero/quantized_reduce.h"
#include "core/zero/wait_clock.h"
#include "parallel/dist.h"
#include "tests/multirank/core/engine/test_models.h"
#include "tests/support/mpi_world.h"

namespace {

std::shared_ptr<zt::dist::Communicator>& g_comm = zt::testing::mpi_world();

constexpr int64_t kGlobalBatch = 48;
constexpr int kSteps = 5;
constexpr double kRtol = 1e-5, kAtol = 2e-6;

struct Trace {
  std::vector<double> losses, grad_norms;
  std::map<std::string, torch::Tensor> params;
  zt::MemoryReport memory;
};

std::shared_ptr<zt::testing::TinyTransformerImpl> make_model() {
  torch::manual_seed(1234);
  return zt::testing::TinyTransformer().ptr();
}

std::pair<torch::Tensor, torch::Tensor> global_batch(int step) {
  torch::manual_seed(100 + step);
  torch::Tensor x = torch::randn({kGlobalBatch, 6, 5});
  return {x, torch::randn({kGlobalBatch, 3})};
}

zt::EngineOptions options(int mics, int accumulation) {
  zt::EngineOptions o;
  o.stage = 3;
  o.mics_shard_size = mics;
  o.stage3_param_persistence_threshold = 0;  // shard every buffer, however small
  o.gradient_accumulation_steps = accumulation;
  o.gradient_clipping = 0.05;  // acts: the norms here are about 0.1-1
  o.reduce_bucket_size = 97;   // several padded buckets per unit
  o.stage3_prefetch_bucket_size = 200;
  o.optimizer.type = zt::optim::OptimizerKind::kAdamW;
  o.hyper.lr = 1e-2;
  o.hyper.weight_decay = 0.01;
  o.units = {"block0", "block1"};
  return o;
}

// Trains steps [first, last) of the schedule; the engine's counters say where it is.
// before_step(s) runs after step s's last backward, before its optimizer step.
void train(zt::Engine& engine, zt::testing::TinyTransformerImpl& m, int first, int last, Trace& t,
           const std::function<void(int)>& before_step = {}) {
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
      if (before_step && a == accumulation - 1) before_step(s);
      engine.step();
      loss_sum += loss.item<double>();
    }
    torch::Tensor l = torch::full({1}, loss_sum, torch::kDouble);
    g_comm->all_reduce(l)->wait();
    t.losses.push_back(l.item<double>() / (world * accumulation));
    t.grad_norms.push_back(engine.last_grad_norm());
  }
}

void snapshot(zt::Engine& engine, zt::testing::TinyTransformerImpl& m, Trace& t) {
  t.memory = engine.memory();
  zt::Engine::GatheredParameters full(engine);
  for (auto& p : m.named_parameters())
    t.params[p.key()] = p.value().detach().to(torch::kFloat).clone();
}

Trace run(int mics, int accumulation, at::ScalarType dtype = at::kFloat) {
  auto m = make_model();
  zt::EngineOptions o = options(mics, accumulation);
  o.compute_dtype = dtype;
  zt::Engine engine(m, o, g_comm);
  EXPECT_EQ(engine.shard_communicator().size(), mics > 0 ? mics : g_comm->size());
  EXPECT_EQ(engine.replica_index(), mics > 0 ? g_comm->rank() / mics : 0);
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
    EXPECT_NEAR(got.grad_norms[s], want.grad_norms[s], rtol * std::abs(want.grad_norms[s]) + 1e-7)
        << what << ": gradient norm of step " << s;
  }
  for (const auto& [name, w] : want.params) {
    const torch::Tensor& g = got.params.at(name);
    EXPECT_TRUE(torch::allclose(g, w, rtol, atol))
        << what << ": parameter " << name << " differs by up to "
        << (g - w).abs().max().item<double>();
  }
}

// Building an engine with `o` fails with a zt::Error whose text contains `message`.
void expect_engine_error(const zt::EngineOptions& o, const std::string& message) {
  auto m = make_model();
  try {
    zt::Engine engine(m, o, g_comm);
    ADD_FAILURE() << "accepted; expected the error: " << message;
  } catch (const zt::Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

std::vector<int> group_sizes() {
  std::vector<int> sizes;
  for (int s = 1; s <= g_comm->size(); ++s)
    if (g_comm->size() % s == 0) sizes.push_back(s);
  return sizes;
}

TEST(Mics, EveryGroupSizeTrainsLikePlainStage3) {
  for (int accumulation : {1, 2}) {
    const Trace plain = run(-1, accumulation);
    for (int mics : group_sizes()) {
      const Trace got = run(mics, accumulation);
      expect_close(got, plain, kRtol, kAtol,
                   "mics_shard_size " + std::to_string(mics) + " x" + std::to_string(accumulation) +
                       " at " + std::to_string(g_comm->size()) + " ranks");
      // Model states per rank are those of plain stage 3 over `mics` ranks: parameters and
      // gradients of one shard of `mics` (up to padding), the master being the fp32 shard.
      const int64_t total = plain.memory.param_bytes * g_comm->size();
      EXPECT_NEAR(static_cast<double>(got.memory.param_bytes), static_cast<double>(total) / mics,
                  64.0 * 4 * g_comm->size())
          << "mics_shard_size " << mics;
    }
  }
}

TEST(Mics, Bf16TrainsLikePlainStage3) {
  const Trace plain = run(-1, 1, at::kBFloat16);
  for (int mics : group_sizes()) {
    if (mics == g_comm->size()) continue;
    expect_close(run(mics, 1, at::kBFloat16), plain, 1e-2, 1e-3,
                 "bf16, mics_shard_size " + std::to_string(mics));
  }
}

std::string scratch(const std::string& name) {
  const std::string d = std::string(ZT_BINARY_DIR) + "/test_scratch/mics/" + name;
  if (g_comm->rank() == 0) {
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
  }
  g_comm->barrier()->wait();
  return d;
}

// Saved after 2 steps with one group size, loaded with another (or into plain stage 3, whose
// checkpoints load with hybrid sharding too), 3 more steps: the parameters of the run that never
// stopped, within the tolerance (the reduction order differs after the load).
TEST(Mics, CheckpointsLoadAcrossGroupSizes) {
  const int world = g_comm->size();
  if (world < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::vector<int> sizes = group_sizes();
  for (int saved : sizes) {
    const std::string dir = scratch("save" + std::to_string(saved));
    Trace whole;
    {
      auto m = make_model();
      zt::Engine engine(m, options(saved, 1), g_comm);
      train(engine, *m, 0, 2, whole);
      zt::save_checkpoint(engine, dir, "step2", {{"note", "saved"}});
      train(engine, *m, 2, kSteps, whole);
      snapshot(engine, *m, whole);
    }
    // Only the first group writes: shard files of `saved` ranks.
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(std::filesystem::exists(dir + "/step2/" + zt::ckpt::shard_file_name(r)), r < saved)
          << "shard file of rank " << r << " with mics_shard_size " << saved;
    }
    for (int loaded : {-1, sizes.front(), sizes.back(), saved}) {
      auto m = make_model();
      zt::Engine engine(m, options(loaded, 1), g_comm);
      zt::ClientState client = zt::load_checkpoint(engine, dir);
      EXPECT_EQ(client.at("note"), "saved");
      EXPECT_EQ(engine.global_step(), 2);
      Trace resumed;
      train(engine, *m, 2, kSteps, resumed);
      snapshot(engine, *m, resumed);
      Trace tail = whole;
      tail.losses.erase(tail.losses.begin(), tail.losses.begin() + 2);
      tail.grad_norms.erase(tail.grad_norms.begin(), tail.grad_norms.begin() + 2);
      const std::string what = "saved with mics_shard_size " + std::to_string(saved) +
                               ", loaded with " + std::to_string(loaded);
      if (loaded == saved) {
        // Exact resume: the same layout and reduction order, so bit for bit.
        EXPECT_EQ(resumed.losses, tail.losses) << what;
        for (const auto& [name, w] : tail.params)
          EXPECT_TRUE(torch::equal(resumed.params.at(name), w)) << what << ": " << name;
      } else {
        expect_close(resumed, tail, kRtol, kAtol, what);
      }
    }
  }
}

TEST(Mics, GroupSizeThatDoesNotDivideTheWorldIsAnError) {
  const int world = g_comm->size();
  if (world < 2) GTEST_SKIP() << "needs 2 ranks";
  expect_engine_error(options(world + 1, 1), "zero_optimization.mics_shard_size = " +
                                                 std::to_string(world + 1) + " must divide");
}

// The sharding communicator as the engine sees it, counting all-gathers (forwarding all else).
class CountingCommunicator : public zt::dist::Communicator {
 public:
  explicit CountingCommunicator(std::shared_ptr<zt::dist::Communicator> inner)
      : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& backend() const override { return inner_->backend(); }
  c10::Device device() const override { return inner_->device(); }
  zt::dist::WorkPtr all_reduce(at::Tensor& t, zt::dist::ReduceOp op) override {
    if (t.numel() > 1) ++bulk_reductions;  // not a norm, a vote or a loss
    return inner_->all_reduce(t, op);
  }
  zt::dist::WorkPtr reduce_scatter(const at::Tensor& in, at::Tensor& out,
                                   zt::dist::ReduceOp op) override {
    ++bulk_reductions;
    return inner_->reduce_scatter(in, out, op);
  }
  zt::dist::WorkPtr all_gather(const at::Tensor& in, at::Tensor& out) override {
    ++all_gathers;
    gather_bytes += static_cast<int64_t>(in.numel() * in.element_size()) * size();
    return inner_->all_gather(in, out);
  }
  zt::dist::WorkPtr all_to_all(const at::Tensor& in, at::Tensor& out) override {
    return inner_->all_to_all(in, out);
  }
  zt::dist::WorkPtr broadcast(at::Tensor& t, int root) override {
    return inner_->broadcast(t, root);
  }
  zt::dist::WorkPtr barrier() override { return inner_->barrier(); }
  std::shared_ptr<zt::dist::Communicator> split(const std::vector<int>& ranks) override {
    return inner_->split(ranks);
  }
  int all_gathers = 0;
  int64_t gather_bytes = 0;  // received by every rank together
  int bulk_reductions = 0;   // gradient all-reduces and reduce-scatters over every rank

 private:
  std::shared_ptr<zt::dist::Communicator> inner_;
};

struct HpzRun {
  Trace trace;
  int world_gathers = 0;
  int64_t secondary_bytes_before_step = 0;  // param_bytes after backward minus at the end
};

HpzRun run_hpz(int hpz, int mics, int64_t reuse = 0) {
  auto counting = std::make_shared<CountingCommunicator>(g_comm);
  auto m = make_model();
  zt::EngineOptions o = options(mics, 1);
  o.zero_hpz_partition_size = hpz;
  // 0: every block released after its forward, so that backward gathers it again (from the hpz
  // group's secondary copy); at the default reuse distance this small model's blocks stay
  // gathered from forward to backward and backward gathers nothing.
  o.stage3_max_reuse_distance = reuse;
  zt::Engine engine(m, o, counting);
  HpzRun r;
  const int before = counting->all_gathers;
  train(engine, *m, 0, kSteps, r.trace, [&](int s) {
    if (s == 0) r.secondary_bytes_before_step = engine.memory().param_bytes;
  });
  // After every step the secondary copies are gone again.
  r.secondary_bytes_before_step -= engine.memory().param_bytes;
  r.world_gathers = counting->all_gathers - before;
  snapshot(engine, *m, r.trace);
  return r;
}

void expect_bit_identical(const Trace& got, const Trace& want, const std::string& what) {
  EXPECT_EQ(got.losses, want.losses) << what;
  EXPECT_EQ(got.grad_norms, want.grad_norms) << what;
  for (const auto& [name, w] : want.params) {
    EXPECT_TRUE(torch::equal(got.params.at(name), w))
        << what << ": parameter " << name << " differs by up to "
        << (got.params.at(name) - w).abs().max().item<double>();
  }
}

// hpZ groups of 2 at 4 ranks, blocks released after their forward: bit for bit plain stage 3,
// with half the shard-group gathers (the backward's moved to the pairs) and a secondary copy of 1/2
// of every sharded buffer held from forward to step. Also under hybrid sharding over all 4 ranks.
TEST(Hpz, SecondaryPartitionTrainsBitForBitLikePlainStage3) {
  const int world = g_comm->size();
  ASSERT_EQ(world, 4) << "registered for 4 ranks";
  const HpzRun plain = run_hpz(1, -1);
  EXPECT_EQ(plain.secondary_bytes_before_step, 0);
  for (int mics : {-1, 4}) {
    const HpzRun hpz = run_hpz(2, mics);
    const std::string what = "hpz 2, mics_shard_size " + std::to_string(mics);
    expect_bit_identical(hpz.trace, plain.trace, what);
    // Without hpZ a declared unit's buffers are gathered for its forward and again for its
    // backward (U each per step), the root unit's once for both (R): plain = 2U + R per step.
    // With hpZ the backward's go to the hpz group: U + R on the sharding communicator.
    // The root's frozen buffer (the model's frozen input layer) is gathered with the root; its
    // values never change, so its secondary copy stays, and only the first forward's gather of
    // it reads the shards.
    const int frozen = 1;
    const int plain_gathers = plain.world_gathers / kSteps,
              hpz_gathers = (hpz.world_gathers - frozen) / kSteps;
    EXPECT_EQ(plain.world_gathers % kSteps, 0);
    EXPECT_EQ((hpz.world_gathers - frozen) % kSteps, 0) << what;
    const int units = plain_gathers - hpz_gathers - frozen, root = hpz_gathers - units;
    EXPECT_GE(units, 2) << what << ": every block's buffers moved to the hpz group";
    EXPECT_GE(root, 1) << what << ": the root unit still gathers from the shards";
    EXPECT_LT(root, units) << what;
    // The secondary copies: half of every sharded full buffer (4 bytes per fp32 element), i.e.
    // twice the primary shards' bytes.
    EXPECT_EQ(hpz.secondary_bytes_before_step, 2 * plain.trace.memory.param_bytes) << what;
  }
  // Blocks kept from forward to backward (the default reuse distance) train the same bits.
  expect_bit_identical(run_hpz(2, -1, zt::EngineOptions().stage3_max_reuse_distance).trace,
                       plain.trace, "hpz 2, blocks kept for backward");
}

TEST(Hpz, SizeThatDoesNotDivideTheShardGroupIsAnError) {
  zt::EngineOptions o = options(-1, 1);
  o.zero_hpz_partition_size = 3;
  expect_engine_error(o,
                      "zero_optimization.zero_hpz_partition_size = 3 must divide the ranks the "
                      "state is sharded over (4)");
}

struct QwzRun {
  Trace trace;
  int64_t gather_bytes = 0;  // over the training steps, on the sharding communicator
  double init_error = 0;     // largest |gathered - exact| of the initial weights
  double init_bound = 0;     // half a step of the largest block: max|w| / 254
};

QwzRun run_qwz(bool quantized, int hpz) {
  auto counting = std::make_shared<CountingCommunicator>(g_comm);
  auto m = make_model();
  std::map<std::string, torch::Tensor> exact;
  double absmax = 0;
  for (auto& p : m->named_parameters()) {
    exact[p.key()] = p.value().detach().clone();
    absmax = std::max(absmax, p.value().detach().abs().max().item<double>());
  }
  zt::EngineOptions o = options(-1, 1);
  o.zero_quantized_weights = quantized;
  o.zero_hpz_partition_size = hpz;
  zt::Engine engine(m, o, counting);
  QwzRun r;
  {
    zt::Engine::GatheredParameters full(engine);
    for (auto& p : m->named_parameters()) {
      r.init_error = std::max(r.init_error,
                              (p.value().detach() - exact.at(p.key())).abs().max().item<double>());
    }
  }
  r.init_bound = absmax / 254;
  const int64_t before = counting->gather_bytes;
  train(engine, *m, 0, kSteps, r.trace);
  r.gather_bytes = counting->gather_bytes - before;
  return r;
}

TEST(Qwz, QuantizedGathersMoveAQuarterOfTheBytesWithinTheirBound) {
  const QwzRun plain = run_qwz(false, 1);
  std::vector<int> hpz_sizes = {1};
  if (g_comm->size() == 4) hpz_sizes.push_back(2);
  for (int hpz : hpz_sizes) {
    const std::string what = "qwZ, hpz " + std::to_string(hpz);
    const QwzRun q = run_qwz(true, hpz);
    EXPECT_EQ(plain.init_error, 0) << "plain stage 3 gathers the exact weights";
    EXPECT_GT(q.init_error, 0) << what << ": nothing was quantized";
    EXPECT_LE(q.init_error, q.init_bound * (1 + 1e-5)) << what;
    ASSERT_EQ(q.trace.losses.size(), plain.trace.losses.size());
    for (size_t s = 0; s < q.trace.losses.size(); ++s) {
      EXPECT_NEAR(q.trace.losses[s], plain.trace.losses[s], 1e-2 * plain.trace.losses[s])
          << what << ": loss of step " << s;
    }
    if (hpz == 1) {
      // int8 values plus one fp32 scale per block (the buckets here are a few dozen elements,
      // so one block each): a little over a quarter of fp32's bytes.
      const double ratio = static_cast<double>(q.gather_bytes) / plain.gather_bytes;
      EXPECT_GT(ratio, 0.25) << what;
      EXPECT_LT(ratio, 0.35) << what;
    }
  }
}

// Environment variables set for a scope (an empty value unsets), restored on destruction.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<std::string, std::string>> vars) {
    for (const auto& [k, v] : vars) {
      const char* old = std::getenv(k.c_str());
      saved_.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
      if (v.empty()) {
        unsetenv(k.c_str());
      } else {
        setenv(k.c_str(), v.c_str(), 1);
      }
    }
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_) {
      if (v) {
        setenv(k.c_str(), v->c_str(), 1);
      } else {
        unsetenv(k.c_str());
      }
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// mpirun's ranks as 2 nodes of 2 for discover_node_layout (OpenMPI's local rank and size).
class TwoNodesOfTwo : public ScopedEnv {
 public:
  TwoNodesOfTwo()
      : ScopedEnv({{"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(g_comm->rank() % 2)}}) {}
};

TEST(Qgz, TwoHopInt8ReductionIsTheSumWithinItsBound) {
  ASSERT_EQ(g_comm->size(), 4) << "registered for 4 ranks";
  const int rank = g_comm->rank();
  zt::dist::NodeGroups groups;
  groups.intra = zt::dist::split_partition(*g_comm, {{0, 1}, {2, 3}});
  groups.inter = zt::dist::split_partition(*g_comm, {{0, 2}, {1, 3}});
  for (int64_t n : {1001, 20000}) {
    torch::manual_seed(50 + rank);
    torch::Tensor full = torch::randn({4 * n}) * torch::rand({4 * n}).pow(3) * 3;
    torch::Tensor exact = torch::empty({n});
    torch::Tensor in = full.clone();
    g_comm->reduce_scatter(in, exact, zt::dist::ReduceOp::kSum)->wait();
    zt::zero::WaitClock clock;
    zt::zero::QuantizedReduceScatter q(groups, full);
    const torch::Tensor got = q.finish(clock);
    ASSERT_EQ(got.numel(), n);
    // Hop 1: each of the 2 addends off by half a step of its block (<= max|x| / 254); hop 2: each
    // of the 2 partial sums off by half a step of its block (<= 2 max|x| / 254 + hop 1's error).
    torch::Tensor m = full.abs().max().reshape({1});
    g_comm->all_reduce(m, zt::dist::ReduceOp::kMax)->wait();
    const double bound = (2 * 2 + 2 * 2) * m.item<double>() / 254;
    const double err = (got - exact).abs().max().item<double>();
    EXPECT_LE(err, bound) << n;
    EXPECT_GT(err, 0) << n << ": nothing was quantized";
    // The errors are small and unbiased: the direction of the sum is kept.
    const double cosine =
        (got * exact).sum().item<double>() / (got.norm() * exact.norm()).item<double>();
    EXPECT_GT(cosine, 0.999) << n;
  }
}

TEST(Qgz, TrainsWithinOnePercentOfPlainStage3) {
  ASSERT_EQ(g_comm->size(), 4) << "registered for 4 ranks";
  TwoNodesOfTwo nodes;
  const QwzRun plain = run_qwz(false, 1);
  for (bool full_zeropp : {false, true}) {
    const std::string what = full_zeropp ? "qgZ + qwZ + hpZ 2" : "qgZ";
    auto m = make_model();
    zt::EngineOptions o = options(-1, 1);
    o.zero_quantized_gradients = true;
    o.zero_quantized_weights = full_zeropp;
    o.zero_hpz_partition_size = full_zeropp ? 2 : 1;
    zt::Engine engine(m, o, g_comm);
    Trace t;
    train(engine, *m, 0, kSteps, t);
    ASSERT_EQ(t.losses.size(), plain.trace.losses.size());
    for (size_t s = 0; s < t.losses.size(); ++s) {
      const double want = plain.trace.losses[s];
      EXPECT_NEAR(t.losses[s], want, 1e-2 * want) << what << ": loss of step " << s;
    }
    EXPECT_NE(t.losses.back(), plain.trace.losses.back()) << what << ": nothing was quantized";
  }
}

// The hierarchical reduction of stages 0-2 (core/zero/hierarchical_reduce.h) on 2 nodes of 2:
// the same sums as the flat collectives over every rank, added in another order.
TEST(Hierarchical, TwoLevelReductionsEqualTheFlatOnes) {
  ASSERT_EQ(g_comm->size(), 4) << "registered for 4 ranks";
  const int rank = g_comm->rank();
  zt::dist::NodeGroups groups;
  groups.intra = zt::dist::split_partition(*g_comm, {{0, 1}, {2, 3}});
  groups.inter = zt::dist::split_partition(*g_comm, {{0, 2}, {1, 3}});
  using Kind = zt::zero::HierarchicalReduce::Kind;
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    // bf16 rounds each partial sum to 8 bits: the orders differ by up to two ulps of the largest
    // sums (atol below); fp32 by a few ulps of each value.
    const double rtol = dtype == at::kFloat ? 1e-6 : 0.0;
    for (int64_t n : {1, 1001}) {
      torch::manual_seed(70 + rank);
      const torch::Tensor full = (torch::randn({4 * n}) * 3).to(dtype);
      const std::string what = std::string(c10::toString(dtype)) + ", n " + std::to_string(n);
      zt::zero::WaitClock clock;
      // Stage 0: the all-reduce.
      torch::Tensor flat = full.clone(), two_level = full.clone();
      g_comm->all_reduce(flat)->wait();
      const double atol =
          dtype == at::kFloat ? 1e-6 : flat.abs().max().item<double>() * 2 * std::ldexp(1.0, -8);
      zt::zero::HierarchicalReduce ar(groups, Kind::kAllReduce, two_level);
      const torch::Tensor summed = ar.finish(clock);
      EXPECT_TRUE(summed.is_same(two_level)) << what << ": the all-reduce is in place";
      EXPECT_TRUE(torch::allclose(summed.to(torch::kFloat), flat.to(torch::kFloat), rtol, atol))
          << what << ": all-reduce differs by " << (summed - flat).abs().max().item<double>();
      // Stages 1-2: this rank's chunk of the reduce-scatter.
      torch::Tensor chunk = torch::empty({n}, full.options()), in = full.clone();
      g_comm->reduce_scatter(in, chunk)->wait();
      zt::zero::HierarchicalReduce rs(groups, Kind::kReduceScatter, full);
      const torch::Tensor got = rs.finish(clock);
      ASSERT_EQ(got.numel(), n) << what;
      EXPECT_EQ(got.scalar_type(), dtype) << what;
      EXPECT_TRUE(torch::allclose(got.to(torch::kFloat), chunk.to(torch::kFloat), rtol, atol))
          << what << ": reduce-scatter differs by " << (got - chunk).abs().max().item<double>();
    }
  }
}

// A training run over a communicator that counts what ran over every rank.
struct CountedRun {
  Trace trace;
  int bulk_reductions = 0;  // gradient all-reduces and reduce-scatters, during training
  int world_gathers = 0;    // all-gathers (publishes, stage-3 gathers), during training
};

CountedRun run_counted(const zt::EngineOptions& o) {
  auto counting = std::make_shared<CountingCommunicator>(g_comm);
  auto m = make_model();
  zt::Engine engine(m, o, counting);
  CountedRun r;
  const int before = counting->bulk_reductions, gathers_before = counting->all_gathers;
  train(engine, *m, 0, kSteps, r.trace);
  r.bulk_reductions = counting->bulk_reductions - before;
  r.world_gathers = counting->all_gathers - gathers_before;
  snapshot(engine, *m, r.trace);
  return r;
}

CountedRun run_reduce(int stage, int accumulation, at::ScalarType dtype, bool hierarchical) {
  // kAuto: the default, which takes the two levels over MPI on two nodes.
  zt::EngineOptions o = options(-1, accumulation);
  o.hierarchical_reduce = hierarchical ? zt::EngineOptions::TwoLevelReduce::kAuto
                                       : zt::EngineOptions::TwoLevelReduce::kOff;
  o.stage = stage;
  o.compute_dtype = dtype;
  return run_counted(o);
}

TEST(Hierarchical, StagesZeroToTwoTrainLikeTheFlatReduction) {
  ASSERT_EQ(g_comm->size(), 4) << "registered for 4 ranks";
  TwoNodesOfTwo nodes;
  for (int stage : {0, 1, 2}) {
    for (int accumulation : {1, 2}) {
      const std::string what =
          "stage " + std::to_string(stage) + " x" + std::to_string(accumulation);
      const CountedRun flat = run_reduce(stage, accumulation, at::kFloat, false);
      const CountedRun two_level = run_reduce(stage, accumulation, at::kFloat, true);
      EXPECT_GT(flat.bulk_reductions, 0) << what << ": the flat run reduced over every rank";
      EXPECT_EQ(two_level.bulk_reductions, 0)
          << what << ": a gradient reduction still ran over every rank";
      if (stage > 0) {
        EXPECT_GT(flat.world_gathers, 0) << what << ": the flat run published over every rank";
        EXPECT_EQ(two_level.world_gathers, 0) << what << ": a publish still ran over every rank";
      }
      expect_close(two_level.trace, flat.trace, kRtol, kAtol, what);
    }
  }
  const CountedRun flat = run_reduce(2, 1, at::kBFloat16, false);
  expect_close(run_reduce(2, 1, at::kBFloat16, true).trace, flat.trace, 1e-2, 1e-3, "bf16 stage 2");
}

// One node (every rank's local size is the world): nothing to split, the reduction stays flat.
TEST(Hierarchical, OneNodeReducesFlat) {
  ScopedEnv one_node({{"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(g_comm->size())},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(g_comm->rank())}});
  const CountedRun r = run_reduce(2, 1, at::kFloat, true);
  EXPECT_GT(r.bulk_reductions, 0);
}

// MiCS's mics_hierarchical_params_gather with one shard group over both nodes (mics_shard_size
// 4 at 4 ranks as 2 nodes of 2): each gather runs across nodes, then in the node, and moves the
// same values, so training is bit for bit the one-all-gather run's, with no parameter gather left
// on the shard group itself. Also with the shards in host memory (offload_param cpu).
// The shard group is every rank here, so its gathers are the world's.
CountedRun run_gather(bool hierarchical, int accumulation, bool offload) {
  zt::EngineOptions o = options(g_comm->size(), accumulation);
  o.mics_hierarchical_params_gather = hierarchical;
  if (offload) o.offload_param.device = zt::OffloadDevice::kCpu;
  return run_counted(o);
}

TEST(HierarchicalGather, AcrossNodesThenInTheNodeIsBitForBit) {
  ASSERT_EQ(g_comm->size(), 4) << "registered for 4 ranks";
  TwoNodesOfTwo nodes;
  for (bool offload : {false, true}) {
    for (int accumulation : {1, 2}) {
      const std::string what =
          std::string(offload ? "offload_param cpu, " : "") + "x" + std::to_string(accumulation);
      const CountedRun flat = run_gather(false, accumulation, offload);
      const CountedRun two_level = run_gather(true, accumulation, offload);
      EXPECT_GT(flat.world_gathers, 0) << what;
      EXPECT_EQ(two_level.world_gathers, 0) << what << ": a gather still ran over the shard group";
      expect_bit_identical(two_level.trace, flat.trace, what);
    }
  }
}

}  // namespace
