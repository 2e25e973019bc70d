// DeepSpeed's bf16 masters (bf16.bf16_master_weights_and_grads, bf16_optimizer_states) at every
// stage that has them (1-3), every optimizer placement (none, cpu, nvme) and both state dtypes,
// against single-process training written from DeepSpeed's CPUAdam (csrc/includes/cpu_adam.h:
// each element's bf16 parameter and state read as fp32, AdamW in fp32, stored rounded to nearest
// even): a bf16 model whose parameters are the master, Adam's moments in fp32 or rounded to bf16
// after every step. Each rank computes the reference itself.
//
// Tolerance: no parameter element more than one bf16 step (2^-7 of its magnitude, or 1e-6 near
// zero) from the reference, and at least 99.9% of elements bit for bit (on this project's CI
// machine every element is). The reference sums the micro-batches' bf16 gradients in the
// engine's order, so what is left is the fp32 update's own rounding (CpuAdam fuses multiply-adds,
// torch's AdamW does not), which can move an update that lands on a bf16 rounding boundary by one
// step. The learning rate (1e-3) is below half a bf16 step of most weights, so an fp32 master
// (which accumulates those updates) fails the bound: checked too.

#include <filesystem>
#include <map>
#include <unistd.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/error.h"
#include "core/checkpoint/async_checkpoint.h"
#include "core/checkpoint/checkpoint.h"
#include "core/engine.h"
#include "core/zero/master_store.h"
#include "parallel/dist.h"
#include "tests/multirank/core/engine/test_models.h"
#include "tests/support/mpi_world.h"

namespace {

std::shared_ptr<zt::dist::Communicator>& g_comm = zt::testing::mpi_world();

constexpr int64_t kGlobalBatch = 16;
constexpr int kSteps = 6;
constexpr double kLr = 1e-3, kWd = 0.01;

std::shared_ptr<zt::testing::TinyTransformerImpl> make_model() {
  torch::manual_seed(1234);
  auto m = zt::testing::TinyTransformer().ptr();
  m->to(torch::kBFloat16);
  return m;
}

std::pair<torch::Tensor, torch::Tensor> global_batch(int step) {
  torch::manual_seed(100 + step);
  return {torch::randn({kGlobalBatch, 6, 5}), torch::randn({kGlobalBatch, 3})};
}

torch::Tensor loss_of(zt::testing::TinyTransformerImpl& m, const torch::Tensor& x,
                      const torch::Tensor& y) {
  return torch::mse_loss(m.forward(x.to(torch::kBFloat16)).to(torch::kFloat), y);
}

using Params = std::map<std::string, torch::Tensor>;

// Single process: the bf16 parameters are the master; each step widens them and the moments to
// fp32, runs torch's AdamW there, and rounds everything it stores. The gradient is bf16 as the
// engine's: the global batch in world * accumulation micro-batches, each one's bf16 gradient
// summed in bf16 in the order the engine adds them (stage 1 accumulates a rank's micro-batches,
// then reduces over the ranks; stages 2-3 reduce each micro-step, then accumulate), times
// 1 / (world * accumulation) in fp32.
Params reference(bool bf16_states, int world, int accumulation, bool reduce_each_micro_step) {
  auto model = make_model();
  std::vector<torch::Tensor> wide;
  std::vector<torch::Tensor> params;
  for (auto& p : model->parameters()) {
    if (!p.requires_grad()) continue;
    params.push_back(p);
    wide.push_back(p.detach().to(torch::kFloat).requires_grad_(true));
  }
  torch::optim::AdamW opt(wide, torch::optim::AdamWOptions(kLr).weight_decay(kWd));
  const int64_t micro = kGlobalBatch / (world * accumulation);
  const float factor = static_cast<float>(1.0 / (world * accumulation));
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = global_batch(s);
    // g[r][a]: rank r's micro-batch a.
    std::vector<std::vector<std::vector<torch::Tensor>>> g(world);
    for (int r = 0; r < world; ++r) {
      for (int a = 0; a < accumulation; ++a) {
        const int64_t first = (static_cast<int64_t>(a) * world + r) * micro;
        model->zero_grad();
        loss_of(*model, x.narrow(0, first, micro), y.narrow(0, first, micro)).backward();
        std::vector<torch::Tensor> grads;
        for (auto& p : params) grads.push_back(p.grad().clone());
        g[r].push_back(std::move(grads));
      }
    }
    std::vector<torch::Tensor> total(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      auto sum_ranks = [&](int a) {
        torch::Tensor t = g[0][a][i];
        for (int r = 1; r < world; ++r) t = t + g[r][a][i];
        return t;
      };
      auto sum_micro = [&](int r) {
        torch::Tensor t = g[r][0][i];
        for (int a = 1; a < accumulation; ++a) t = t + g[r][a][i];
        return t;
      };
      if (reduce_each_micro_step) {
        total[i] = sum_ranks(0);
        for (int a = 1; a < accumulation; ++a) total[i] = total[i] + sum_ranks(a);
      } else {
        total[i] = sum_micro(0);
        for (int r = 1; r < world; ++r) total[i] = total[i] + sum_micro(r);
      }
    }
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      wide[i].copy_(params[i]);
      wide[i].mutable_grad() = total[i].to(torch::kFloat) * factor;
    }
    opt.step();
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].copy_(wide[i]);  // rounds to nearest even
      if (bf16_states) {
        auto& st = static_cast<torch::optim::AdamWParamState&>(
            *opt.state().at(wide[i].unsafeGetTensorImpl()));
        st.exp_avg().copy_(st.exp_avg().to(torch::kBFloat16));
        st.exp_avg_sq().copy_(st.exp_avg_sq().to(torch::kBFloat16));
      }
    }
  }
  Params out;
  for (auto& p : model->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

std::string scratch(const std::string& what, bool shared = false) {
  torch::Tensor id =
      torch::full({1}, g_comm->rank() == 0 || !shared ? ::getpid() : 0, torch::kLong);
  if (shared) g_comm->all_reduce(id)->wait();
  const auto dir = std::filesystem::temp_directory_path() /
                   ("zt_bf16_master_" + what + "_" + std::to_string(id.item<int64_t>()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

struct Case {
  int stage;
  zt::OffloadDevice offload;
  bool bf16_states;
  int accumulation = 1;
};

std::string name(const Case& c) {
  const char* off = c.offload == zt::OffloadDevice::kNone  ? "none"
                    : c.offload == zt::OffloadDevice::kCpu ? "cpu"
                                                           : "nvme";
  return "stage " + std::to_string(c.stage) + " offload " + off +
         (c.bf16_states ? " bf16 states" : " fp32 states") + " x" + std::to_string(c.accumulation) +
         " on " + std::to_string(g_comm->size()) + " rank(s)";
}

zt::EngineOptions options(const Case& c, const std::string& nvme_dir) {
  zt::EngineOptions o;
  o.stage = c.stage;
  o.stage3_param_persistence_threshold = 0;
  o.gradient_accumulation_steps = c.accumulation;
  o.compute_dtype = at::kBFloat16;
  o.master_dtype = at::kBFloat16;
  o.grad_accum_dtype = at::kBFloat16;
  o.optimizer_state_dtype = c.bf16_states ? at::kBFloat16 : at::kFloat;
  o.reduce_bucket_size = 300;  // several buckets, each padded
  o.optimizer.type = zt::optim::OptimizerKind::kAdamW;
  o.hyper.lr = kLr;
  o.hyper.weight_decay = kWd;
  o.units = {"block0", "block1"};
  o.offload_optimizer.device = c.offload;
  if (c.offload == zt::OffloadDevice::kNvme) {
    o.offload_optimizer.nvme_path = nvme_dir;
    o.sub_group_size = 100;  // several chunks per buffer, the last one short
  }
  return o;
}

void train(zt::Engine& engine, zt::testing::TinyTransformerImpl& model, int accumulation, int from,
           int to) {
  const int world = g_comm->size(), rank = g_comm->rank();
  const int64_t micro = kGlobalBatch / (world * accumulation);
  for (int s = from; s < to; ++s) {
    auto [x, y] = global_batch(s);
    for (int a = 0; a < accumulation; ++a) {
      const int64_t first = (static_cast<int64_t>(a) * world + rank) * micro;
      torch::Tensor loss = engine.forward(
          [&] { return loss_of(model, x.narrow(0, first, micro), y.narrow(0, first, micro)); });
      engine.backward(loss);
      engine.step();
    }
  }
}

Params gathered(zt::Engine& engine, torch::nn::Module& model) {
  Params out;
  zt::Engine::GatheredParameters full(engine);
  for (auto& p : model.named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

// Elements farther than one bf16 step from the reference, and the share that is bit for bit.
struct Agreement {
  int64_t far = 0, same = 0, total = 0;
  std::string worst;
};

Agreement compare(const Params& got, const Params& want) {
  Agreement a;
  double worst = 0;
  for (const auto& [n, w] : want) {
    const torch::Tensor g = got.at(n).to(torch::kFloat), wf = w.to(torch::kFloat);
    const torch::Tensor diff = (g - wf).abs();
    const torch::Tensor bound = (wf.abs() * std::ldexp(1.0, -7)).clamp_min(1e-6);
    a.far += (diff > bound).sum().item<int64_t>();
    a.same += (diff == 0).sum().item<int64_t>();
    a.total += w.numel();
    const double d = (diff / bound).max().item<double>();
    if (d > worst) {
      worst = d;
      a.worst = n + " (" + std::to_string(d) + " bf16 steps)";
    }
  }
  return a;
}

void expect_agrees(const Params& got, const Params& want, const std::string& what) {
  const Agreement a = compare(got, want);
  EXPECT_EQ(a.far, 0) << what << ": " << a.far << " of " << a.total
                      << " elements more than one bf16 step off; worst " << a.worst;
  EXPECT_GE(static_cast<double>(a.same), 0.999 * static_cast<double>(a.total))
      << what << ": only " << a.same << " of " << a.total << " elements bit for bit";
}

class Bf16Master : public ::testing::TestWithParam<Case> {};

TEST_P(Bf16Master, MatchesSingleProcessBf16MasterAdamW) {
  const Case c = GetParam();
  const std::string dir = scratch("train");
  auto model = make_model();
  zt::Engine engine(model, options(c, dir), g_comm);
  // The master and the moments are stored in their dtypes, wherever they live.
  EXPECT_EQ(engine.master_store().master_dtype(), at::kBFloat16);
  EXPECT_EQ(engine.master_store().state_dtype(), c.bf16_states ? at::kBFloat16 : at::kFloat);
  train(engine, *model, c.accumulation, 0, kSteps);
  const zt::MemoryReport mem = engine.memory();
  int64_t stepped = 0;
  for (const auto& s : engine.shard_states()) stepped += s.stepped.size();
  if (c.offload == zt::OffloadDevice::kNvme) {
    EXPECT_GT(mem.nvme_bytes, 0);
  } else {
    EXPECT_EQ(mem.optimizer_state_bytes, stepped * 2 * (c.bf16_states ? 2 : 4)) << name(c);
  }
  expect_agrees(gathered(engine, *model),
                reference(c.bf16_states, g_comm->size(), c.accumulation, c.stage >= 2), name(c));
  std::filesystem::remove_all(dir);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int stage : {1, 2, 3}) {
    for (auto off : {zt::OffloadDevice::kNone, zt::OffloadDevice::kCpu, zt::OffloadDevice::kNvme}) {
      for (bool states : {false, true}) out.push_back({stage, off, states});
    }
  }
  out.push_back({1, zt::OffloadDevice::kNone, false, 2});
  out.push_back({2, zt::OffloadDevice::kCpu, true, 2});
  out.push_back({3, zt::OffloadDevice::kNvme, false, 2});
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllPlacements, Bf16Master, ::testing::ValuesIn(cases()));

// The bound separates the two masters: the same run with an fp32 master (which keeps the updates
// a bf16 master rounds away) is far from the bf16-master reference.
TEST(Bf16MasterBound, AnFp32MasterFailsIt) {
  Case c{2, zt::OffloadDevice::kCpu, false};
  auto model = make_model();
  zt::EngineOptions o = options(c, "");
  o.master_dtype = at::kFloat;
  o.grad_accum_dtype = at::kFloat;
  zt::Engine engine(model, o, g_comm);
  train(engine, *model, 1, 0, kSteps);
  const Agreement a = compare(gathered(engine, *model), reference(false, g_comm->size(), 1, true));
  EXPECT_GT(a.far, a.total / 100) << "an fp32 master came within the bf16 master's bound";
}

// A checkpoint of a bf16 master holds fp32 records: saved from NVMe (synchronously and in the
// background) and loaded into CPU offload, or the other way round, the run goes on exactly as if
// it had not stopped.
TEST(Bf16MasterCheckpoint, MovesBetweenPlacementsExactly) {
  for (bool async : {false, true}) {
    for (auto [from, to] : {std::pair{zt::OffloadDevice::kNvme, zt::OffloadDevice::kCpu},
                            std::pair{zt::OffloadDevice::kCpu, zt::OffloadDevice::kNvme}}) {
      const std::string what = std::string(async ? "async " : "") + "checkpoint";
      const std::string nvme = scratch("ckpt_nvme"), ckpt = scratch("ckpt", /*shared=*/true);
      Case a{3, from, true}, b{3, to, true};
      auto straight_model = make_model();
      zt::Engine straight(straight_model, options(a, nvme), g_comm);
      train(straight, *straight_model, 1, 0, kSteps);
      const Params want = gathered(straight, *straight_model);

      {
        auto m = make_model();
        zt::Engine e(m, options(a, nvme), g_comm);
        train(e, *m, 1, 0, 3);
        if (async) {
          zt::AsyncCheckpointer saver(e);
          saver.save(ckpt, "step3", {}, {});
          saver.wait();
        } else {
          zt::save_checkpoint(e, ckpt, "step3");
        }
      }
      auto m = make_model();
      zt::Engine e(m, options(b, nvme), g_comm);
      zt::load_checkpoint(e, ckpt, "step3");
      train(e, *m, 1, 3, kSteps);
      const Params got = gathered(e, *m);
      for (const auto& [n, w] : want) {
        EXPECT_TRUE(torch::equal(got.at(n), w))
            << what << " " << name(a) << " -> " << name(b) << ": parameter " << n << " differs";
      }
      g_comm->barrier()->wait();
      if (g_comm->rank() == 0) std::filesystem::remove_all(ckpt);
      std::filesystem::remove_all(nvme);
    }
  }
}

// Only Adam and AdamW step a bf16 master (as DeepSpeed's CPUAdam and FusedAdam): another
// optimizer is refused with one line naming it.
TEST(Bf16MasterOptimizer, OtherOptimizersAreRefused) {
  Case c{2, zt::OffloadDevice::kNone, true};
  zt::EngineOptions o = options(c, "");
  o.optimizer.type = zt::optim::OptimizerKind::kLion;
  auto model = make_model();
  try {
    zt::Engine engine(model, o, g_comm);
    FAIL() << "Lion with a bf16 master was accepted";
  } catch (const zt::Error& e) {
    EXPECT_NE(e.message().find("bf16.bf16_master_weights_and_grads steps with Adam or AdamW"),
              std::string::npos)
        << e.message();
    EXPECT_NE(e.message().find("Lion"), std::string::npos) << e.message();
  }
}

}  // namespace
