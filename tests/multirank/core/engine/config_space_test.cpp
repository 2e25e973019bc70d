// Equivalence over the configuration space: configurations drawn from what users write (ZeRO
// stage, accumulation, bucket sizes, stage3_param_persistence_threshold, prefetch, clipping,
// fp32/bf16, optimizer offload to cpu/nvme, offload_param cpu/nvme, sub_group_size, max_in_cpu),
// each value either a number, DeepSpeed's default (the key left out) or Hugging Face's "auto"
// (resolved from the model's hidden size as the Trainer does), go through the config reader and
// engine_options_from_config exactly as a program's config does, and must train like stage 0 of
// the same config at the same world size: per-step losses and final parameters.
//
// Tolerance: fp32 rtol 1e-5, atol 2e-6 (the reduction order differs by a few ulps, as in
// engine_equivalence_test.cpp); bf16 rtol 2e-2, atol 2e-3 on the parameters (an fp32 master that
// differs by an ulp can round its bf16 copy one bf16 ulp, 2^-8 relative, the other way) and 1e-2
// relative on the losses.
//
// The CI run (ConfigSpace.SeededSample) draws ZT_CONFIG_SPACE_CASES configurations (default 30)
// per world size from a fixed seed, each value of every dimension at least once; the slow run
// (ConfigSpace.WholeSpace, label slow) takes every combination of the dimensions that decide
// where state lives (stage x accumulation x persistence x dtype x optimizer offload x parameter
// offload) with the others cycled through their values.

#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/config/config.h"
#include "core/config/engine_config.h"
#include "core/engine.h"
#include "tests/multirank/core/engine/test_models.h"
#include "tests/support/mpi_world.h"

namespace {

std::shared_ptr<zt::dist::Communicator>& g_comm = zt::testing::mpi_world();

constexpr int64_t kGlobalBatch = 36;  // divisible by world x accumulation for 1..3 x 1..3
constexpr int kSteps = 5;
constexpr int64_t kHidden = zt::testing::TinyTransformerImpl::kWidth;

// One dimension of the space: its name and its values, each a JSON fragment for the key ("" =
// the key left out, DeepSpeed's default).
struct Dimension {
  std::string name;
  std::vector<std::string> values;
};

// Indices into kDims, in this order.
enum Dim {
  kStage,
  kAccumulation,
  kPersistence,
  kDtype,
  kOffloadOptimizer,
  kOffloadParam,
  kBucket,
  kPrefetch,
  kClipping,
  kSubGroup,
  kMaxInCpu,
  kDimCount
};

const std::vector<Dimension>& dims() {
  static const std::vector<Dimension> d = {
      {"stage", {"1", "2", "3"}},
      {"gradient_accumulation_steps", {"1", "2", "3"}},
      {"stage3_param_persistence_threshold", {"0", "50", "", "\"auto\""}},
      {"dtype", {"fp32", "bf16"}},
      {"offload_optimizer", {"none", "cpu", "nvme"}},
      {"offload_param", {"none", "cpu", "nvme"}},
      {"reduce_bucket_size", {"", "\"auto\"", "97"}},
      {"stage3_prefetch_bucket_size", {"", "\"auto\"", "40"}},
      {"gradient_clipping", {"", "\"auto\"", "0.05"}},
      {"sub_group_size", {"", "64"}},
      {"max_in_cpu", {"", "0"}},
  };
  return d;
}

using Combo = std::vector<size_t>;  // value index per dimension

std::string describe(const Combo& c) {
  std::string s;
  for (size_t d = 0; d < c.size(); ++d) {
    const std::string& v = dims()[d].values[c[d]];
    s += (s.empty() ? "" : " ") + dims()[d].name + "=" + (v.empty() ? "default" : v);
  }
  return s;
}

const std::string& value(const Combo& c, Dim d) {
  return dims()[d].values[c[d]];
}

// A key of the config: `"name": value,` or nothing for the default.
std::string key(const std::string& name, const std::string& v) {
  return v.empty() ? "" : "\"" + name + "\": " + v + ", ";
}

// This rank's scratch directory for NVMe files (removed with the engine's case).
std::string scratch_dir() {
  static const std::string dir = [] {
    std::string d =
        (std::filesystem::temp_directory_path() / ("zt_config_space_" + std::to_string(getpid())))
            .string();
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// The DeepSpeed config of a combination; `reference` makes it stage 0 without offload.
std::string config_json(const Combo& c, bool reference) {
  const int world = g_comm->size();
  const int acc = std::stoi(value(c, kAccumulation));
  std::ostringstream z;
  z << "\"stage\": " << (reference ? "0" : value(c, kStage)) << ", ";
  z << key("reduce_bucket_size", value(c, kBucket));
  if (!reference) {
    z << key("stage3_param_persistence_threshold", value(c, kPersistence));
    z << key("stage3_prefetch_bucket_size", value(c, kPrefetch));
    z << key("sub_group_size", value(c, kSubGroup));
    const std::string& opt = value(c, kOffloadOptimizer);
    if (opt == "cpu") z << "\"offload_optimizer\": {\"device\": \"cpu\"}, ";
    if (opt == "nvme") {
      z << "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"" << scratch_dir()
        << "/opt\"}, ";
    }
    const std::string& par = value(c, kOffloadParam);
    if (par == "cpu") z << "\"offload_param\": {\"device\": \"cpu\"}, ";
    if (par == "nvme") {
      z << "\"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"" << scratch_dir()
        << "/param\", " << key("max_in_cpu", value(c, kMaxInCpu)) << "\"pin_memory\": false}, ";
    }
  }
  z << "\"overlap_comm\": true";
  std::ostringstream j;
  j << "{\"train_micro_batch_size_per_gpu\": " << kGlobalBatch / (world * acc) << ", "
    << "\"gradient_accumulation_steps\": " << acc << ", "
    << key("gradient_clipping", value(c, kClipping))
    << "\"bf16\": {\"enabled\": " << (value(c, kDtype) == "bf16" ? "true" : "false") << "}, "
    << "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.01}}, "
    << "\"zero_optimization\": {" << z.str() << "}}";
  return j.str();
}

struct Trace {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> params;
};

std::pair<torch::Tensor, torch::Tensor> global_batch(int step) {
  torch::manual_seed(100 + step);
  torch::Tensor x = torch::randn({kGlobalBatch, 6, 5});
  return {x, torch::randn({kGlobalBatch, 3})};
}

Trace train(const Combo& c, bool reference) {
  zt::ProgramValues program;
  program.hidden_size = kHidden;
  program.gradient_clipping = 1.0;  // the Trainer's max_grad_norm default, for "auto"
  zt::Config config = zt::parse_config(config_json(c, reference), zt::ConfigFormat::kJson, {},
                                       g_comm->size(), program);
  zt::resolve_program_autos(config, program);
  zt::EngineOptions options = zt::engine_options_from_config(config, {"block0", "block1"});
  torch::manual_seed(1234);
  zt::testing::TinyTransformer model;
  zt::Engine engine(model.ptr(), options, g_comm);
  const at::ScalarType dtype = options.compute_dtype;
  const int world = g_comm->size(), rank = g_comm->rank();
  const int acc = options.gradient_accumulation_steps;
  const int64_t micro = kGlobalBatch / (world * acc);
  Trace t;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = global_batch(s);
    double loss_sum = 0;
    for (int a = 0; a < acc; ++a) {
      const int64_t first = (static_cast<int64_t>(a) * world + rank) * micro;
      torch::Tensor xs = x.narrow(0, first, micro).to(dtype), ys = y.narrow(0, first, micro);
      torch::Tensor loss =
          engine.forward([&] { return torch::mse_loss(model->forward(xs).to(torch::kFloat), ys); });
      engine.backward(loss);
      engine.step();
      loss_sum += loss.item<double>();
    }
    torch::Tensor l = torch::full({1}, loss_sum, torch::kDouble);
    g_comm->all_reduce(l)->wait();
    t.losses.push_back(l.item<double>() / (world * acc));
  }
  zt::Engine::GatheredParameters full(engine);
  for (auto& p : model->named_parameters()) {
    t.params[p.key()] = p.value().detach().to(torch::kFloat).clone();
  }
  return t;
}

// Returns "" when `got` trains like `want`, else what differs (first loss, then parameters).
std::string compare(const Trace& got, const Trace& want, bool bf16) {
  const double loss_rtol = bf16 ? 1e-2 : 1e-5;
  const double rtol = bf16 ? 2e-2 : 1e-5, atol = bf16 ? 2e-3 : 2e-6;
  std::ostringstream why;
  for (size_t s = 0; s < want.losses.size(); ++s) {
    if (std::abs(got.losses[s] - want.losses[s]) > loss_rtol * std::abs(want.losses[s]) + 1e-7) {
      why << "loss of step " << s << " is " << got.losses[s] << ", stage 0 has " << want.losses[s]
          << "; ";
      break;
    }
  }
  for (const auto& [name, w] : want.params) {
    const torch::Tensor& g = got.params.at(name);
    if (!torch::allclose(g, w, rtol, atol)) {
      why << "parameter " << name << " differs by up to " << (g - w).abs().max().item<double>()
          << "; ";
    }
  }
  return why.str();
}

// Runs every combination against stage 0 of its own config (references cached by what stage 0
// depends on) and reports each one that differs.
void check_all(const std::vector<Combo>& combos) {
  std::map<std::string, Trace> references;
  std::vector<std::string> failures;
  for (const Combo& c : combos) {
    const std::string ref_key = config_json(c, /*reference=*/true);
    if (!references.count(ref_key)) references[ref_key] = train(c, /*reference=*/true);
    std::filesystem::create_directories(scratch_dir() + "/opt");
    std::filesystem::create_directories(scratch_dir() + "/param");
    std::string why;
    try {
      why = compare(train(c, /*reference=*/false), references[ref_key], value(c, kDtype) == "bf16");
    } catch (const std::exception& e) {
      why = std::string("threw: ") + e.what();
    }
    std::filesystem::remove_all(scratch_dir() + "/opt");
    std::filesystem::remove_all(scratch_dir() + "/param");
    if (!why.empty()) failures.push_back(describe(c) + ": " + why);
  }
  std::filesystem::remove_all(scratch_dir());
  for (const auto& f : failures) ADD_FAILURE() << "world " << g_comm->size() << ", " << f;
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << combos.size()
                                << " configurations train unlike stage 0";
}

// `count` combinations from a fixed seed: dimension d takes its values in a shuffled order,
// cycling, so every value of every dimension appears once count reaches the largest dimension.
std::vector<Combo> seeded_sample(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<size_t>> orders;
  for (const auto& d : dims()) {
    std::vector<size_t> o(d.values.size());
    for (size_t i = 0; i < o.size(); ++i) o[i] = i;
    std::shuffle(o.begin(), o.end(), rng);
    orders.push_back(o);
  }
  std::vector<Combo> out;
  for (size_t i = 0; i < count; ++i) {
    Combo c;
    for (size_t d = 0; d < orders.size(); ++d) {
      // A different stride per round keeps dimensions of equal size from moving in lockstep.
      const size_t n = orders[d].size();
      c.push_back(orders[d][(i + (i / n) * (d + 1)) % n]);
    }
    out.push_back(c);
  }
  return out;
}

TEST(ConfigSpace, SeededSampleTrainsLikeStageZero) {
  const char* env = std::getenv("ZT_CONFIG_SPACE_CASES");
  const size_t count = env ? std::stoul(env) : 30;
  std::vector<Combo> combos = seeded_sample(count, 20261201u + g_comm->size());
  // Every value of every dimension (DeepSpeed's defaults and "auto" among them) is drawn.
  for (size_t d = 0; d < dims().size(); ++d) {
    for (size_t v = 0; v < dims()[d].values.size(); ++v) {
      bool seen = false;
      for (const Combo& c : combos) seen = seen || c[d] == v;
      EXPECT_TRUE(seen) << dims()[d].name << " value '" << dims()[d].values[v]
                        << "' is never drawn";
    }
  }
  check_all(combos);
}

TEST(ConfigSpace, WholeSpaceTrainsLikeStageZero) {
  if (!std::getenv("ZT_CONFIG_SPACE_ALL"))
    GTEST_SKIP() << "set ZT_CONFIG_SPACE_ALL (ctest -L slow)";
  std::vector<Combo> combos;
  const auto& d = dims();
  size_t i = 0;
  for (size_t st = 0; st < d[kStage].values.size(); ++st)
    for (size_t ac = 0; ac < d[kAccumulation].values.size(); ++ac)
      for (size_t pe = 0; pe < d[kPersistence].values.size(); ++pe)
        for (size_t dt = 0; dt < d[kDtype].values.size(); ++dt)
          for (size_t oo = 0; oo < d[kOffloadOptimizer].values.size(); ++oo)
            for (size_t op = 0; op < d[kOffloadParam].values.size(); ++op, ++i) {
              Combo c(kDimCount);
              c[kStage] = st;
              c[kAccumulation] = ac;
              c[kPersistence] = pe;
              c[kDtype] = dt;
              c[kOffloadOptimizer] = oo;
              c[kOffloadParam] = op;
              for (int k = kBucket; k < kDimCount; ++k) c[k] = (i + k) % d[k].values.size();
              combos.push_back(c);
            }
  check_all(combos);
}

}  // namespace
