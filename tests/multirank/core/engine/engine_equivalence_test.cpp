// Equivalence (docs/DESIGN.md): for every ZeRO stage, world size and accumulation count with the
// same global batch, parameters after k optimizer steps equal single-process torch::optim::AdamW
// training within a stated tolerance, losses match step by step, frozen parameters stay
// bit-identical. Run under mpirun -np 1..4; each rank also computes the single-process reference
// itself (the models are tiny), so no rank trusts another's numbers.
//
// Tolerance: fp32, rtol 1e-5 and atol 2e-6. The reduction order across ranks and buckets differs
// from the single-process sum, which moves gradients by a few ulps; Adam's normalisation keeps
// that at the same relative size in the weights after 5 steps.

#include <filesystem>
#include <functional>
#include <map>
#include <unistd.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/error.h"
#include "core/engine.h"
#include "core/zero/host_caching_allocator.h"
#include "core/zero/master_store.h"
#include "parallel/dist.h"
#include "parallel/flight_recorder.h"
#include "parallel/recording_communicator.h"
#include "tests/multirank/core/engine/test_models.h"
#include "tests/support/mpi_world.h"

namespace {

std::shared_ptr<zt::dist::Communicator>& g_comm = zt::testing::mpi_world();

constexpr int64_t kGlobalBatch = 48;  // divisible by world * accumulation for 1..4 x {1, 4}
constexpr int kSteps = 5;
constexpr double kRtol = 1e-5, kAtol = 2e-6;
const std::vector<std::string> kNoDecay = {"bias", "ln"};

enum class ModelKind { kMlp, kTransformer };

std::shared_ptr<torch::nn::Module> make_model(ModelKind kind) {
  torch::manual_seed(1234);
  if (kind == ModelKind::kMlp) return zt::testing::Mlp().ptr();
  return zt::testing::TinyTransformer().ptr();
}

torch::Tensor run_model(torch::nn::Module& m, ModelKind kind, const torch::Tensor& x) {
  if (kind == ModelKind::kMlp) return static_cast<zt::testing::MlpImpl&>(m).forward(x);
  return static_cast<zt::testing::TinyTransformerImpl&>(m).forward(x);
}

std::pair<torch::Tensor, torch::Tensor> global_batch(ModelKind kind, int step) {
  torch::manual_seed(100 + step);
  torch::Tensor x = kind == ModelKind::kMlp ? torch::randn({kGlobalBatch, 7})
                                            : torch::randn({kGlobalBatch, 6, 5});
  return {x, torch::randn({kGlobalBatch, 3})};
}

bool no_decay(const std::string& name) {
  for (const auto& p : kNoDecay)
    if (name.find(p) != std::string::npos) return true;
  return false;
}

struct Trace {
  std::vector<double> losses;
  std::vector<double> grad_norms;
  std::map<std::string, torch::Tensor> params;
};

constexpr double kLr = 1e-2, kWd = 0.01;

// lr multiplier of a parameter in the reference (1: no layer-wise decay).
using LrScale = std::function<double(const std::string&)>;

Trace reference(ModelKind kind, double clip, const LrScale& lr_scale = nullptr) {
  auto model = make_model(kind);
  // One torch group per parameter, with its own lr and weight decay.
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (auto& p : model->named_parameters()) {
    if (!p.value().requires_grad()) continue;
    const double lr = kLr * (lr_scale ? lr_scale(p.key()) : 1.0);
    groups.emplace_back(
        std::vector<torch::Tensor>{p.value()},
        std::make_unique<torch::optim::AdamWOptions>(
            torch::optim::AdamWOptions(lr).weight_decay(no_decay(p.key()) ? 0.0 : kWd)));
  }
  torch::optim::AdamW opt(groups, torch::optim::AdamWOptions(kLr));
  Trace t;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = global_batch(kind, s);
    opt.zero_grad();
    torch::Tensor loss = torch::mse_loss(run_model(*model, kind, x), y);
    loss.backward();
    std::vector<torch::Tensor> trainable;
    for (auto& p : model->parameters())
      if (p.requires_grad()) trainable.push_back(p);
    double norm = torch::nn::utils::clip_grad_norm_(trainable, clip > 0 ? clip : 1e30);
    t.grad_norms.push_back(norm);
    opt.step();
    t.losses.push_back(loss.item<double>());
  }
  for (auto& p : model->named_parameters()) t.params[p.key()] = p.value().detach().clone();
  return t;
}

zt::EngineOptions engine_options(ModelKind kind, int stage, int accumulation, double clip) {
  zt::EngineOptions o;
  o.stage = stage;
  // Stage 3 shards every buffer, however small (DeepSpeed's default threshold would keep
  // this test's small buffers gathered).
  o.stage3_param_persistence_threshold = 0;
  o.gradient_accumulation_steps = accumulation;
  o.gradient_clipping = clip;
  o.reduce_bucket_size = 97;  // several buckets per unit, each padded
  o.stage3_prefetch_bucket_size = 200;
  o.optimizer.type = zt::optim::OptimizerKind::kAdamW;
  o.hyper.lr = kLr;
  o.hyper.weight_decay = kWd;
  o.param_groups.no_decay_patterns = kNoDecay;
  if (kind == ModelKind::kTransformer) o.units = {"block0", "block1"};
  return o;
}

Trace train_with_engine(ModelKind kind, int stage, int accumulation, double clip,
                        zt::MemoryReport* memory = nullptr,
                        const std::function<void(zt::EngineOptions&)>& adjust = nullptr) {
  auto model = make_model(kind);
  std::map<std::string, torch::Tensor> frozen_before;
  for (auto& p : model->named_parameters())
    if (!p.value().requires_grad()) frozen_before[p.key()] = p.value().detach().clone();

  zt::EngineOptions options = engine_options(kind, stage, accumulation, clip);
  if (adjust) adjust(options);
  zt::Engine engine(model, options, g_comm);
  const int world = g_comm->size(), rank = g_comm->rank();
  const int64_t micro = kGlobalBatch / (world * accumulation);
  Trace t;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = global_batch(kind, s);
    double loss_sum = 0;
    for (int a = 0; a < accumulation; ++a) {
      EXPECT_EQ(engine.is_gradient_accumulation_boundary(), a == accumulation - 1);
      const int64_t first = (static_cast<int64_t>(a) * world + rank) * micro;
      torch::Tensor xs = x.narrow(0, first, micro), ys = y.narrow(0, first, micro);
      torch::Tensor loss =
          engine.forward([&] { return torch::mse_loss(run_model(*model, kind, xs), ys); });
      engine.backward(loss);
      engine.step();
      loss_sum += loss.item<double>();
    }
    torch::Tensor l = torch::full({1}, loss_sum, torch::kDouble);
    g_comm->all_reduce(l)->wait();
    t.losses.push_back(l.item<double>() / (world * accumulation));
    t.grad_norms.push_back(engine.last_grad_norm());
  }
  EXPECT_EQ(engine.global_step(), kSteps);
  if (memory) *memory = engine.memory();
  {
    zt::Engine::GatheredParameters full(engine);
    for (auto& p : model->named_parameters()) t.params[p.key()] = p.value().detach().clone();
  }
  for (auto& [name, before] : frozen_before) {
    EXPECT_TRUE(torch::equal(t.params[name], before)) << "frozen parameter " << name << " changed";
  }
  return t;
}

void expect_same(const Trace& got, const Trace& want, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < got.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], kRtol * std::abs(want.losses[s]) + 1e-7)
        << what << ": loss of step " << s;
  }
  for (const auto& [name, w] : want.params) {
    auto it = got.params.find(name);
    ASSERT_NE(it, got.params.end()) << name;
    double max_diff = (it->second - w).abs().max().item<double>();
    EXPECT_TRUE(torch::allclose(it->second, w, kRtol, kAtol))
        << what << ": parameter " << name << " differs by up to " << max_diff;
  }
}

struct Case {
  ModelKind kind;
  int stage;
  int accumulation;
};

class EngineEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(EngineEquivalence, MatchesSingleProcessAdamW) {
  const Case c = GetParam();
  Trace want = reference(c.kind, 0.0);
  Trace got = train_with_engine(c.kind, c.stage, c.accumulation, 0.0);
  expect_same(got, want,
              "stage " + std::to_string(c.stage) + " x" + std::to_string(c.accumulation) +
                  " world " + std::to_string(g_comm->size()));
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (ModelKind k : {ModelKind::kMlp, ModelKind::kTransformer})
    for (int stage = 0; stage <= 3; ++stage)
      for (int acc : {1, 4}) cases.push_back({k, stage, acc});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(StagesModelsAccumulation, EngineEquivalence,
                         ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.kind == ModelKind::kMlp ? "Mlp"
                                                                                 : "Transformer") +
                                  "Stage" + std::to_string(info.param.stage) + "Acc" +
                                  std::to_string(info.param.accumulation);
                         });

// A CPU model's engine makes the host caching allocator (core/zero/host_caching_allocator.h)
// LibTorch's CPU allocator for its lifetime. A model whose buffers and activations are large
// enough for it trains bit-identically with and without it (host_cache false), and once the first
// steps have mapped their blocks, a step maps none: every large tensor reuses a block.
TEST(EngineHostCache, StepsReuseTheirBlocksAndTrainAsWithoutTheCache) {
  auto train = [](bool cache, std::vector<int64_t>* mapped_after_step) {
    torch::manual_seed(77);
    auto model = std::make_shared<torch::nn::SequentialImpl>(
        torch::nn::Linear(256, 512), torch::nn::ReLU(), torch::nn::Linear(512, 256));
    zt::EngineOptions o;
    o.stage = 3;
    o.stage3_param_persistence_threshold = 0;
    o.optimizer.type = zt::optim::OptimizerKind::kAdamW;
    o.hyper.lr = 1e-3;
    o.host_cache = cache;
    std::map<std::string, torch::Tensor> params;
    {
      zt::Engine engine(model, o, g_comm);
      EXPECT_EQ(zt::zero::host_cache_installed(), cache);
      const int rank = g_comm->rank();
      for (int s = 0; s < 5; ++s) {
        torch::manual_seed(500 + 10 * s + rank);
        torch::Tensor x = torch::randn({256, 256}), y = torch::randn({256, 256});
        torch::Tensor loss = engine.forward([&] { return torch::mse_loss(model->forward(x), y); });
        engine.backward(loss);
        engine.step();
        if (mapped_after_step != nullptr) {
          mapped_after_step->push_back(zt::zero::host_cache_stats().allocations);
        }
      }
      engine.for_each_full_parameter(
          [&](const std::string& name, const at::Tensor& full) { params[name] = full.clone(); });
    }
    EXPECT_FALSE(zt::zero::host_cache_installed()) << "the engine's destruction uninstalls it";
    return params;
  };
  const zt::zero::HostCacheStats before = zt::zero::host_cache_stats();
  std::vector<int64_t> mapped;
  auto with = train(true, &mapped);
  EXPECT_GT(zt::zero::host_cache_stats().reuses, before.reuses);
  ASSERT_EQ(mapped.size(), 5u);
  EXPECT_GT(mapped[0], before.allocations) << "the cache served the first step";
  EXPECT_EQ(mapped[4], mapped[2]) << "steps 4 and 5 mapped blocks";
  auto without = train(false, nullptr);
  ASSERT_EQ(with.size(), without.size());
  for (const auto& [name, t] : with) EXPECT_TRUE(torch::equal(t, without.at(name))) << name;
}

TEST(EngineClipping, ClippedNormEqualsSingleProcessNorm) {
  const double clip = 0.05;  // small enough that every step clips
  Trace want = reference(ModelKind::kTransformer, clip);
  for (int stage : {0, 1, 2, 3}) {
    Trace got = train_with_engine(ModelKind::kTransformer, stage, 2, clip);
    for (size_t s = 0; s < want.grad_norms.size(); ++s) {
      EXPECT_GT(want.grad_norms[s], clip) << "the test must clip";
      EXPECT_NEAR(got.grad_norms[s], want.grad_norms[s], 1e-5 * want.grad_norms[s])
          << "stage " << stage << " step " << s;
    }
    expect_same(got, want, "clipped stage " + std::to_string(stage));
  }
}

// Model-state bytes per rank against docs/DESIGN.md's table for fp32 Adam (params 4, grads 4, K = 8
// bytes per parameter, no separate master): exact up to the padding of each flat buffer.
TEST(EngineMemory, AccountedBytesMatchTheDesignFormula) {
  const int n = g_comm->size();
  int64_t psi = 0;
  {
    auto m = make_model(ModelKind::kTransformer);
    for (auto& p : m->parameters())
      if (p.requires_grad()) psi += p.numel();
  }
  for (int stage = 0; stage <= 3; ++stage) {
    zt::MemoryReport mem;
    train_with_engine(ModelKind::kTransformer, stage, 1, 0.0, &mem);
    auto expected = [&](int64_t ps) -> std::array<int64_t, 3> {
      // {params, grads, optimizer state}; shards are ceil(ps / n) per buffer, hence the bounds.
      switch (stage) {
        case 0: return {4 * ps, 4 * ps, 8 * ps};
        case 1: return {4 * ps, 4 * ps, 8 * ps / n};
        case 2: return {4 * ps, 4 * ps / n, 8 * ps / n};
        default: return {4 * ps / n, 4 * ps / n, 8 * ps / n};
      }
    };
    // Each of the buffers pads by at most n - 1 elements.
    const int64_t buffers = 2 * 2 * ((psi / 97) + 4);
    auto lo = expected(psi), hi = expected(psi + buffers * (n - 1) + buffers);
    std::array<int64_t, 3> got = {mem.param_bytes, mem.grad_bytes, mem.optimizer_state_bytes};
    for (int i = 0; i < 3; ++i) {
      EXPECT_GE(got[i], lo[i]) << "stage " << stage << " term " << i;
      EXPECT_LE(got[i], hi[i]) << "stage " << stage << " term " << i;
    }
    EXPECT_EQ(mem.master_bytes, 0) << "fp32 without offload keeps no separate master";
    if (stage == 3) {
      // Peak gathered parameters: at most the root unit plus the two blocks (the largest units).
      const int64_t block = [&] {
        zt::testing::Block b(12, 3);
        int64_t s = 0;
        for (auto& p : b->parameters()) s += p.numel();
        return s;
      }();
      const int64_t root = psi - 2 * block;
      EXPECT_LE(mem.peak_gathered_param_bytes, 4 * (root + 2 * block + buffers * n));
      EXPECT_GT(mem.peak_gathered_param_bytes, 0);
      EXPECT_EQ(mem.gathered_param_bytes, 0) << "everything released after the scope";
    }
  }
}

// parameter_groups.layer_lr_decay: the blocks are layers 1 and 2 (prefix "block"), the embedding
// layer 0 and everything else (ln_f, head) the top layer 3; lr scale = decay^(3 - layer), written
// here by hand from optim/param_groups.h's documented rule.
TEST(EngineParamGroups, LayerwiseLrDecayTrainsLikePerGroupAdamW) {
  constexpr double kDecay = 0.5;
  auto scale = [](const std::string& name) {
    if (name.rfind("embed.", 0) == 0) return kDecay * kDecay * kDecay;
    if (name.rfind("block0.", 0) == 0) return kDecay * kDecay;
    if (name.rfind("block1.", 0) == 0) return kDecay;
    return 1.0;
  };
  Trace want = reference(ModelKind::kTransformer, 0.0, scale);
  Trace plain = reference(ModelKind::kTransformer, 0.0);
  ASSERT_FALSE(
      torch::allclose(want.params["embed.weight"], plain.params["embed.weight"], kRtol, kAtol))
      << "the decay must change the result for this test to mean anything";
  for (int stage : {0, 1, 2, 3}) {
    Trace got = train_with_engine(ModelKind::kTransformer, stage, 2, 0.0, nullptr,
                                  [&](zt::EngineOptions& o) {
                                    o.param_groups.llrd_decay = kDecay;
                                    o.param_groups.layer_prefixes = {"block"};
                                  });
    expect_same(got, want, "llrd stage " + std::to_string(stage));
  }
}

// prescale_gradients and gradient_predivide_factor move where the 1/N of the average is applied
// (DeepSpeed's gradient_reduction_w_predivide); the result is the same average.
TEST(EngineGradientAveraging, PrescaleAndPredivideTrainLikeSingleProcess) {
  Trace want = reference(ModelKind::kMlp, 0.0);
  for (int stage : {0, 1, 2, 3}) {
    Trace pre = train_with_engine(ModelKind::kMlp, stage, 2, 0.0, nullptr,
                                  [](zt::EngineOptions& o) { o.prescale_gradients = true; });
    expect_same(pre, want, "prescale stage " + std::to_string(stage));
    Trace div = train_with_engine(ModelKind::kMlp, stage, 2, 0.0, nullptr,
                                  [](zt::EngineOptions& o) { o.gradient_predivide_factor = 8; });
    expect_same(div, want, "predivide stage " + std::to_string(stage));
  }
}

// kSteps optimizer steps of one micro-step each, loss_of(step) being this rank's loss; the trace
// holds the mean loss over ranks per step and the full parameters after the last step.
Trace train_one_micro_step_each(zt::Engine& engine, torch::nn::Module& model,
                                const std::function<torch::Tensor(int)>& loss_of) {
  Trace t;
  for (int s = 0; s < kSteps; ++s) {
    torch::Tensor loss = engine.forward([&] { return loss_of(s); });
    engine.backward(loss);
    engine.step();
    torch::Tensor l = torch::full({1}, loss.item<double>(), torch::kDouble);
    g_comm->all_reduce(l)->wait();
    t.losses.push_back(l.item<double>() / g_comm->size());
  }
  zt::Engine::GatheredParameters full(engine);
  for (auto& p : model.named_parameters()) t.params[p.key()] = p.value().detach().clone();
  return t;
}

TEST(EngineOffload, OptimizerOffloadTrainsLikeSingleProcess) {
  Trace want = reference(ModelKind::kMlp, 0.0);
  for (int stage : {1, 2, 3}) {
    auto model = make_model(ModelKind::kMlp);
    zt::EngineOptions o = engine_options(ModelKind::kMlp, stage, 1, 0.0);
    o.offload_optimizer.device = zt::OffloadDevice::kCpu;
    zt::Engine engine(model, o, g_comm);
    // The model is on the CPU: its fp32 parameters (the stage-3 shard) are in host memory
    // already and are the master, as without offload.
    EXPECT_EQ(engine.memory().master_bytes, 0) << "a CPU model's fp32 parameters are the master";
    const int64_t micro = kGlobalBatch / g_comm->size();
    const int rank = g_comm->rank();
    Trace got = train_one_micro_step_each(engine, *model, [&](int s) {
      auto [x, y] = global_batch(ModelKind::kMlp, s);
      torch::Tensor xs = x.narrow(0, rank * micro, micro), ys = y.narrow(0, rank * micro, micro);
      return torch::mse_loss(run_model(*model, ModelKind::kMlp, xs), ys);
    });
    expect_same(got, want, "offload stage " + std::to_string(stage));
  }
}

// Ranks whose graphs differ: odd ranks skip ln_f, so the bucket holding it completes early on
// even ranks and only at the end of backward on odd ones. Every rank must still reduce the same
// buckets in the same order (a mismatch pairs buffers of different sizes across ranks), and the
// result is the average of the ranks' gradients: single-process AdamW on the mean of the ranks'
// losses, each with its own graph.
torch::Tensor skipping_forward(zt::testing::TinyTransformerImpl& m, const torch::Tensor& x,
                               bool skip_ln_f) {
  torch::Tensor h = m.embed->forward(m.frozen->forward(x));
  h = zt::call_unit(*m.block0, h);
  h = zt::call_unit(*m.block1, h);
  if (!skip_ln_f) h = m.ln_f->forward(h);
  return m.head->forward(h.mean(1));
}

TEST(EngineUnevenGraphs, RanksSkippingAParameterTrainLikeSingleProcess) {
  const int world = g_comm->size(), rank = g_comm->rank();
  const int64_t micro = kGlobalBatch / world;
  auto rank_loss = [&](zt::testing::TinyTransformerImpl& m, int s, int r) {
    auto [x, y] = global_batch(ModelKind::kTransformer, s);
    return torch::mse_loss(skipping_forward(m, x.narrow(0, r * micro, micro), r % 2 == 1),
                           y.narrow(0, r * micro, micro));
  };
  Trace want;
  {
    auto model = make_model(ModelKind::kTransformer);
    auto& m = static_cast<zt::testing::TinyTransformerImpl&>(*model);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    for (auto& p : model->named_parameters()) {
      if (!p.value().requires_grad()) continue;
      groups.emplace_back(
          std::vector<torch::Tensor>{p.value()},
          std::make_unique<torch::optim::AdamWOptions>(
              torch::optim::AdamWOptions(kLr).weight_decay(no_decay(p.key()) ? 0.0 : kWd)));
    }
    torch::optim::AdamW opt(groups, torch::optim::AdamWOptions(kLr));
    for (int s = 0; s < kSteps; ++s) {
      opt.zero_grad();
      torch::Tensor loss = rank_loss(m, s, 0);
      for (int r = 1; r < world; ++r) loss = loss + rank_loss(m, s, r);
      loss = loss / world;
      loss.backward();
      opt.step();
      want.losses.push_back(loss.item<double>());
    }
    for (auto& p : model->named_parameters()) want.params[p.key()] = p.value().detach().clone();
  }
  for (int stage : {0, 1, 2, 3}) {
    auto model = make_model(ModelKind::kTransformer);
    auto& m = static_cast<zt::testing::TinyTransformerImpl&>(*model);
    zt::Engine engine(model, engine_options(ModelKind::kTransformer, stage, 1, 0.0), g_comm);
    Trace got =
        train_one_micro_step_each(engine, *model, [&](int s) { return rank_loss(m, s, rank); });
    expect_same(got, want, "uneven graphs, stage " + std::to_string(stage));
  }
}

// Three units and a root whose one parameter is used first in forward, so backward reaches it
// last (as a language model's embeddings).
struct ChainImpl : torch::nn::Module {
  ChainImpl() {
    torch::manual_seed(3);
    emb = register_parameter("emb", torch::randn({6, 8}) * 0.3);
    for (int i = 0; i < 3; ++i) {
      units.push_back(register_module("u" + std::to_string(i), torch::nn::Linear(8, 8)));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = torch::matmul(x, emb);
    for (auto& u : units) h = torch::tanh(zt::call_unit(*u, h));
    return h;
  }
  torch::Tensor emb;
  std::vector<torch::nn::Linear> units;
};

// Each unit's gradients are reduced as soon as the unit completes, in the first backward too,
// whose launch order is a guess (core/zero/grad_sync.h): a guess that started with the root's
// bucket, complete only at the end of backward, held every unit's staging buffer (the whole
// gradient) until then. Counted in the flight recorder: the reduce-scatters started before u0's
// gradient exists are u2's and u1's.
TEST(EngineGradSync, EveryBackwardReducesEachUnitAsItCompletes) {
  std::shared_ptr<zt::dist::Communicator> comm =
      zt::dist::record_collectives(g_comm, zt::dist::FlightOptions{.capacity = 512, .dir = ""}, {});
  auto* recorded = dynamic_cast<zt::dist::RecordingCommunicator*>(comm.get());
  ASSERT_NE(recorded, nullptr);
  auto reductions = [&] {
    int64_t n = 0;
    for (const zt::dist::FlightEntry& e : recorded->recorder()->snapshot()) {
      n += std::string(e.op) == "reduce_scatter";
    }
    return n;
  };
  for (int stage : {2, 3}) {
    auto model = std::make_shared<ChainImpl>();
    zt::EngineOptions o;
    o.stage = stage;
    o.stage3_param_persistence_threshold = 0;
    o.units = {"u0", "u1", "u2"};
    o.optimizer.type = zt::optim::OptimizerKind::kAdamW;
    zt::Engine engine(model, o, comm);
    int64_t before = 0, at_u0 = -1;
    model->units[0]->weight.register_hook([&](torch::Tensor g) {
      at_u0 = reductions() - before;
      return g;
    });
    for (int step = 0; step < 2; ++step) {
      before = reductions();
      torch::manual_seed(100 + step + g_comm->rank());
      torch::Tensor x = torch::randn({4, 6});
      torch::Tensor loss = engine.forward([&] { return model->forward(x).square().mean(); });
      engine.backward(loss);
      engine.step();
      EXPECT_EQ(at_u0, 2) << "stage " << stage << ", step " << step;
    }
  }
}

}  // namespace

// NVMe optimizer offload (core/zero/nvme_optimizer.h) against CPU offload: the same CpuAdam steps
// the same numbers, chunk by chunk from files instead of whole ranges in memory, so parameters and
// losses must be bit-identical after 5 steps, in fp32 and bf16 (the 16-bit copy written in the
// optimizer's pass), with and without the read/write pipeline.
namespace nvme {

std::string scratch() {
  const std::string d = std::string(ZT_BINARY_DIR) + "/test_scratch/nvme_equivalence";
  std::filesystem::create_directories(d);
  return d;
}

Trace train_offloaded(ModelKind kind, int stage, at::ScalarType dtype,
                      const std::function<void(zt::EngineOptions&)>& adjust,
                      zt::MemoryReport* memory, int accumulation = 1) {
  auto model = make_model(kind);
  zt::EngineOptions o = engine_options(kind, stage, accumulation, /*clip=*/0.5);
  o.offload_optimizer.device = zt::OffloadDevice::kCpu;
  o.optimizer.type = zt::optim::OptimizerKind::kCpuAdam;
  o.compute_dtype = dtype;
  if (adjust) adjust(o);
  zt::Engine engine(model, o, g_comm);
  const int world = g_comm->size(), rank = g_comm->rank();
  const int64_t micro = kGlobalBatch / (world * accumulation);
  Trace t;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = global_batch(kind, s);
    for (int a = 0; a < accumulation; ++a) {
      const int64_t first = (static_cast<int64_t>(a) * world + rank) * micro;
      torch::Tensor xs = x.narrow(0, first, micro).to(dtype);
      torch::Tensor ys = y.narrow(0, first, micro).to(dtype);
      torch::Tensor loss = engine.forward(
          [&] { return torch::mse_loss(run_model(*model, kind, xs), ys).to(torch::kFloat); });
      engine.backward(loss);
      engine.step();
      t.losses.push_back(loss.item<double>());
    }
  }
  if (memory) *memory = engine.memory();
  zt::Engine::GatheredParameters full(engine);
  for (auto& p : model->named_parameters()) t.params[p.key()] = p.value().detach().clone();
  return t;
}

void expect_bit_identical(const Trace& got, const Trace& want, const std::string& what) {
  ASSERT_EQ(got.losses, want.losses) << what;
  for (const auto& [name, w] : want.params) {
    EXPECT_TRUE(torch::equal(got.params.at(name), w))
        << what << ": parameter " << name << " differs by up to "
        << (got.params.at(name).to(torch::kFloat) - w.to(torch::kFloat)).abs().max().item<double>();
  }
}

TEST(EngineNvmeOffload, OptimizerStateOnNvmeIsBitIdenticalToCpuOffload) {
  const std::string dir = scratch();
  struct Variant {
    const char* name;
    std::function<void(zt::EngineOptions&)> adjust;
  };
  const std::vector<Variant> variants = {
      {"pipelined, 37-element chunks, 4 buffers",
       [&](zt::EngineOptions& o) {
         o.offload_optimizer.device = zt::OffloadDevice::kNvme;
         o.offload_optimizer.nvme_path = dir;
         o.sub_group_size = 37;
         o.offload_optimizer.buffer_count = 4;
         o.offload_optimizer.pipeline_read = o.offload_optimizer.pipeline_write = true;
         o.aio.thread_count = 2;
       }},
      {"sequential, one buffer, lock-step single submits",
       [&](zt::EngineOptions& o) {
         o.offload_optimizer.device = zt::OffloadDevice::kNvme;
         o.offload_optimizer.nvme_path = dir;
         o.sub_group_size = 1000;
         o.offload_optimizer.buffer_count = 1;
         o.aio.block_size = 4096;
         o.aio.single_submit = true;
         o.aio.overlap_events = false;
       }},
  };
  for (ModelKind kind : {ModelKind::kMlp, ModelKind::kTransformer}) {
    for (int stage : {1, 2, 3}) {
      for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
        // With accumulation the spilled gradient is read back and added to every micro-step.
        for (int accumulation : stage == 1 ? std::vector<int>{1} : std::vector<int>{1, 3}) {
          zt::MemoryReport cpu_mem;
          const Trace want = train_offloaded(kind, stage, dtype, nullptr, &cpu_mem, accumulation);
          for (const Variant& v : variants) {
            const std::string what = std::string(kind == ModelKind::kMlp ? "mlp" : "transformer") +
                                     " stage " + std::to_string(stage) + " " +
                                     c10::toString(dtype) + " accumulation " +
                                     std::to_string(accumulation) + " " + v.name;
            zt::MemoryReport mem;
            const Trace got = train_offloaded(kind, stage, dtype, v.adjust, &mem, accumulation);
            expect_bit_identical(got, want, what);
            // Master and Adam state are on disk (12 bytes per stepped element, page-rounded), not
            // in RAM; CPU offload held them in RAM. At stages 2-3 the reduced gradient slices
            // are in the same files (the model is on the CPU): none is in RAM.
            EXPECT_EQ(mem.master_bytes, 0) << what;
            EXPECT_EQ(mem.optimizer_state_bytes, 0) << what;
            // An fp32 CPU model's parameters were CPU offload's master (master_bytes 0): on
            // NVMe the master is its own fp32 region, half of Adam's two moments.
            const int64_t master_on_disk =
                cpu_mem.master_bytes > 0 ? cpu_mem.master_bytes : cpu_mem.optimizer_state_bytes / 2;
            int64_t on_disk = master_on_disk + cpu_mem.optimizer_state_bytes;
            if (stage >= 2) {
              EXPECT_EQ(mem.grad_bytes, 0) << what;
              EXPECT_GT(cpu_mem.grad_bytes, 0) << what;
              on_disk += cpu_mem.grad_bytes;
            }
            EXPECT_GE(mem.nvme_bytes, on_disk) << what;
            EXPECT_GT(mem.nvme_buffer_bytes, 0) << what;
            EXPECT_EQ(cpu_mem.nvme_bytes, 0) << what;
          }
        }
      }
    }
  }
  // The swap files are scratch space of the engine that made them.
  g_comm->barrier()->wait();
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    ADD_FAILURE() << "swap directory left behind: " << e.path();
  }
  g_comm->barrier()->wait();  // no rank starts the next test's swap files before the listing
}

// Parameter offload (offload_param, stage 3; core/zero/nvme_params.h) against CPU optimizer
// offload with the shards in memory: the shards only move (to files or host memory) between the
// step that writes them and the all-gather that reads them, so parameters and losses must be
// bit-identical after 5 steps, with every parameter shard on NVMe, with part of them kept in host
// memory (max_in_cpu), with the optimizer state on NVMe too, and without optimizer offload.
TEST(EngineNvmeOffload, ParametersOnNvmeAreBitIdenticalToInMemoryShards) {
  const std::string dir = scratch();
  using Device = zt::OffloadDevice;
  auto params_on_nvme = [&](int64_t max_in_cpu, int64_t buffers) {
    return [=](zt::EngineOptions& o) {
      o.offload_param.device = Device::kNvme;
      o.offload_param.nvme_path = dir;
      o.offload_param.max_in_cpu = max_in_cpu;
      o.offload_param.buffer_count = buffers;
      o.offload_param.buffer_size = 1000;
    };
  };
  struct Variant {
    const char* name;
    std::function<void(zt::EngineOptions&)> adjust;
    bool all_on_nvme;
  };
  const std::vector<Variant> variants = {
      {"params nvme, 2 buffers", params_on_nvme(0, 2), true},
      {"params nvme, 1 buffer, first 150 elements in host memory", params_on_nvme(150, 1), false},
      {"params and optimizer nvme",
       [&](zt::EngineOptions& o) {
         params_on_nvme(0, 5)(o);
         o.offload_optimizer.device = zt::OffloadDevice::kNvme;
         o.offload_optimizer.nvme_path = dir;
         o.sub_group_size = 37;
         o.offload_optimizer.buffer_count = 3;
         o.offload_optimizer.pipeline_read = o.offload_optimizer.pipeline_write = true;
       },
       true},
      {"params nvme, no optimizer offload",
       [&](zt::EngineOptions& o) {
         params_on_nvme(0, 3)(o);
         o.offload_optimizer.device = zt::OffloadDevice::kNone;
         o.optimizer.type = zt::optim::OptimizerKind::kAdamW;
       },
       true},
      // The pread/pwrite path, as on a machine without io_uring (a GPU machine's sandbox), where
      // the swap directory's removal at teardown once crashed.
      {"params nvme through pread/pwrite (aio.use_io_uring false), 2 threads",
       [&](zt::EngineOptions& o) {
         params_on_nvme(0, 2)(o);
         o.aio.use_io_uring = false;
         o.aio.thread_count = 2;
       },
       true},
      {"params cpu", [&](zt::EngineOptions& o) { o.offload_param.device = Device::kCpu; }, false},
  };
  for (ModelKind kind : {ModelKind::kMlp, ModelKind::kTransformer}) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      zt::MemoryReport in_memory;
      const Trace want = train_offloaded(kind, 3, dtype, nullptr, &in_memory);
      for (const Variant& v : variants) {
        const std::string what = std::string(kind == ModelKind::kMlp ? "mlp " : "transformer ") +
                                 c10::toString(dtype) + " " + v.name;
        zt::MemoryReport mem;
        const Trace got = train_offloaded(kind, 3, dtype, v.adjust, &mem);
        expect_bit_identical(got, want, what);
        if (v.all_on_nvme) {
          // No shard in memory; each one's file is page-rounded.
          EXPECT_EQ(mem.param_bytes, 0) << what;
          EXPECT_GE(mem.nvme_bytes, in_memory.param_bytes) << what;
          EXPECT_GT(mem.nvme_buffer_bytes, 0) << what;
        }
      }
    }
  }
  g_comm->barrier()->wait();
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    ADD_FAILURE() << "swap directory left behind: " << e.path();
  }
  g_comm->barrier()->wait();
}

// Stage 3 MLP options with every parameter shard in a file under nvme_path (no max_in_cpu
// prefix): the setting of the NVMe parameter error tests below.
zt::EngineOptions nvme_param_options(const std::string& nvme_path) {
  zt::EngineOptions o = engine_options(ModelKind::kMlp, 3, 1, 0.0);
  o.offload_param.device = zt::OffloadDevice::kNvme;
  o.offload_param.nvme_path = nvme_path;
  o.offload_param.max_in_cpu = 0;
  return o;
}

// Too small a swap buffer for the largest shard is one line naming offload_param.buffer_size.
TEST(EngineNvmeOffload, ParameterShardLargerThanBufferSizeIsAnError) {
  auto model = make_model(ModelKind::kMlp);
  zt::EngineOptions o = nvme_param_options(scratch());
  o.offload_param.buffer_size = 10;
  std::string msg;
  try {
    zt::Engine engine(model, o, g_comm);
  } catch (const zt::Error& e) {
    msg = e.message();
  }
  EXPECT_EQ(msg.rfind("zero_optimization.offload_param.buffer_size 10 is smaller than the largest "
                      "parameter shard on NVMe",
                      0),
            0u)
      << msg;
}

// A parameter shard file that lost its bytes: the gather that reads it names the file and the
// offset. Every rank truncates its own file, so every rank stops at the same read (one rank alone
// would leave the others in the all-gather: a real job stops them through the fatal-exit path).
TEST(EngineNvmeOffload, ParameterShardReadErrorNamesTheFile) {
  auto model = make_model(ModelKind::kMlp);
  zt::EngineOptions o = nvme_param_options(scratch());
  o.offload_param.buffer_count = 1;
  zt::Engine engine(model, o, g_comm);
  const std::string dir =
      std::filesystem::path(scratch()) / ("zerotorch_params_rank" + std::to_string(g_comm->rank()) +
                                          "_pid" + std::to_string(::getpid()));
  const std::string bad = dir + "/buffer0.swp";
  ASSERT_TRUE(std::filesystem::exists(bad)) << bad;
  std::filesystem::resize_file(bad, 0);
  auto [x, y] = global_batch(ModelKind::kMlp, 0);
  std::string msg;
  try {
    engine.forward([&] { return torch::mse_loss(run_model(*model, ModelKind::kMlp, x), y); });
  } catch (const zt::Error& e) {
    msg = e.message();
  }
  EXPECT_NE(msg.find("read of " + bad + " at offset 0"), std::string::npos) << msg;
  g_comm->barrier()->wait();
}

// A bad nvme_path stops the engine while it is built, before any collective or step, on every
// rank, with one line naming the path and the bytes needed.
TEST(EngineNvmeOffload, MissingNvmePathStopsBeforeTraining) {
  auto model = make_model(ModelKind::kMlp);
  zt::EngineOptions o = engine_options(ModelKind::kMlp, 2, 1, 0.0);
  o.offload_optimizer.device = zt::OffloadDevice::kCpu;
  o.optimizer.type = zt::optim::OptimizerKind::kCpuAdam;
  o.offload_optimizer.device = zt::OffloadDevice::kNvme;
  o.offload_optimizer.nvme_path = scratch() + "/missing";
  std::string msg;
  try {
    zt::Engine engine(model, o, g_comm);
  } catch (const zt::Error& e) {
    msg = e.message();
  }
  EXPECT_NE(
      msg.find("offload_optimizer.nvme_path " + o.offload_optimizer.nvme_path + " does not exist"),
      std::string::npos)
      << msg;
  EXPECT_NE(msg.find(" bytes there for this rank"), std::string::npos) << msg;
}

// The same for offload_param's nvme_path: one line naming the key, the path and the bytes.
TEST(EngineNvmeOffload, MissingParamNvmePathStopsBeforeTraining) {
  auto model = make_model(ModelKind::kMlp);
  zt::EngineOptions o = nvme_param_options(scratch() + "/missing_params");
  std::string msg;
  try {
    zt::Engine engine(model, o, g_comm);
  } catch (const zt::Error& e) {
    msg = e.message();
  }
  EXPECT_EQ(msg.rfind("zero_optimization.offload_param.nvme_path " + o.offload_param.nvme_path +
                          " does not exist",
                      0),
            0u)
      << msg;
  EXPECT_NE(msg.find("NVMe parameter offload needs "), std::string::npos) << msg;
}

// A swap file that loses its bytes mid-run on the last rank: that rank names the file and the
// offset, every other rank stops too (a vote, not a hang in the next collective).
TEST(EngineNvmeOffload, IoErrorOnOneRankStopsEveryRank) {
  auto model = make_model(ModelKind::kMlp);
  zt::EngineOptions o = engine_options(ModelKind::kMlp, 2, 1, 0.0);
  o.offload_optimizer.device = zt::OffloadDevice::kCpu;
  o.optimizer.type = zt::optim::OptimizerKind::kCpuAdam;
  o.offload_optimizer.device = zt::OffloadDevice::kNvme;
  o.offload_optimizer.nvme_path = scratch();
  zt::Engine engine(model, o, g_comm);
  const int world = g_comm->size(), rank = g_comm->rank();
  const int64_t micro = kGlobalBatch / world;
  auto step = [&](int s) {
    auto [x, y] = global_batch(ModelKind::kMlp, s);
    torch::Tensor xs = x.narrow(0, rank * micro, micro), ys = y.narrow(0, rank * micro, micro);
    torch::Tensor loss =
        engine.forward([&] { return torch::mse_loss(run_model(*model, ModelKind::kMlp, xs), ys); });
    engine.backward(loss);
    engine.step();
  };
  step(0);
  const bool culprit = rank == world - 1;
  const std::string bad = engine.master_store().swap_directory() + "/buffer0_chunk0.swp";
  if (culprit) std::filesystem::resize_file(bad, 0);
  g_comm->barrier()->wait();
  std::string msg;
  try {
    step(1);
  } catch (const zt::Error& e) {
    msg = e.message();
  }
  if (culprit) {
    // The first bytes missing are the master's: the file's gradient region before it (the
    // reduced gradients wait there at stage 2 on a CPU model) was written again by backward.
    const int64_t master_at = engine.master_store().file_chunks(0).at(0).offsets.at(0);
    EXPECT_GT(master_at, 0) << "the gradients are spilled to the chunk files";
    EXPECT_NE(msg.find("read of " + bad + " at offset " + std::to_string(master_at)),
              std::string::npos)
        << msg;
  } else {
    EXPECT_NE(msg.find("an I/O error on another rank stopped the step"), std::string::npos) << msg;
  }
}

}  // namespace nvme
