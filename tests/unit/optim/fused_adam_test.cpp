// FusedAdam (the CUDA plugin's kernel) against CpuAdam and torch::optim::AdamW on the same data.
// Skips with the reason when the plugin or a GPU is missing; the CPU-side contract (no launcher,
// CPU tensors) is tested everywhere.
#include "optim/fused_adam.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/cuda_plugin.h"
#include "base/error.h"
#include "optim/cpu_adam.h"

namespace {

using zt::optim::GroupHyper;
using zt::optim::GroupRange;

TEST(FusedAdam, RejectsCpuTensors) {
  zt::optim::OptimizerSpec spec;
  spec.type = zt::optim::OptimizerKind::kFusedAdam;
  auto opt = zt::optim::make_shard_optimizer(spec);
  torch::Tensor p = torch::zeros({10});
  EXPECT_THROW(opt->step(p, torch::zeros({10}), {{0, 10, {}}}), zt::Error);
}

// The plugin with at least one GPU, or a skip reason.
std::string cuda_unavailable() {
  const zt::cuda::Kernels* k = zt::cuda::kernels();
  if (!k) return zt::cuda::load_error();
  if (k->device_count() == 0) return "plugin loaded, 0 GPUs";
  return "";
}

class FusedAdamCuda : public testing::TestWithParam<bool> {};

TEST_P(FusedAdamCuda, MatchesTorchAdamWAndCpuAdam) {
  const std::string why = cuda_unavailable();
  if (!why.empty()) GTEST_SKIP() << "no CUDA: " << why;
  const bool adamw = GetParam();
  torch::manual_seed(13);
  GroupHyper a;
  a.lr = 1e-2;
  a.weight_decay = 0.1;
  GroupHyper b;
  b.lr = 3e-3;
  b.beta1 = 0.8;
  b.beta2 = 0.95;
  b.eps = 1e-6;
  // 70 groups: more than one launch (kFusedAdamMaxGroups = 64), sizes from 1 to ~100k.
  std::vector<GroupRange> groups;
  int64_t off = 2;
  for (int i = 0; i < 70; ++i) {
    const int64_t len = i == 3 ? 100003 : 1 + (i * 37) % 1000;
    groups.push_back({off, off + len, i % 2 ? a : b});
    off += len + (i % 3);
  }
  const int64_t n = off + 5;
  torch::Tensor master = torch::randn({n});
  torch::Tensor cpu_master = master.clone();
  torch::Tensor gpu_master = master.cuda();
  torch::Tensor gpu_half = torch::zeros({n}, torch::dtype(torch::kBFloat16).device(torch::kCUDA));
  zt::optim::OptimizerSpec spec;
  spec.adamw_mode = adamw;
  spec.type = zt::optim::OptimizerKind::kCpuAdam;
  auto cpu = zt::optim::make_shard_optimizer(spec);
  spec.type = zt::optim::OptimizerKind::kFusedAdam;
  spec.cuda_launcher = zt::cuda::require_symbol(zt::optim::kFusedAdamSymbol, "FusedAdam test");
  auto gpu = zt::optim::make_shard_optimizer(spec);
  std::vector<torch::Tensor> ref;
  std::vector<torch::optim::OptimizerParamGroup> pg;
  for (const GroupRange& g : groups) {
    ref.push_back(master.narrow(0, g.begin, g.end - g.begin).clone().requires_grad_(true));
    auto o = std::make_unique<torch::optim::AdamWOptions>(g.hyper.lr);
    o->betas({g.hyper.beta1, g.hyper.beta2}).eps(g.hyper.eps).weight_decay(g.hyper.weight_decay);
    pg.emplace_back(std::vector<torch::Tensor>{ref.back()}, std::move(o));
  }
  torch::optim::AdamW ref_opt(pg, torch::optim::AdamWOptions(1e-3));
  for (int s = 0; s < 20; ++s) {
    torch::Tensor grad = torch::randn({n});
    cpu->step(cpu_master, grad, groups);
    torch::Tensor gg = grad.cuda();
    gpu->step(gpu_master, gg, groups, &gpu_half);
    if (adamw) {
      for (size_t i = 0; i < ref.size(); ++i) {
        ref[i].mutable_grad() = grad.narrow(0, groups[i].begin, groups[i].end - groups[i].begin);
      }
      ref_opt.step();
    }
  }
  torch::Tensor got = gpu_master.cpu();
  const double scale = cpu_master.abs().max().item<double>();
  EXPECT_LT((got - cpu_master).abs().max().item<double>() / scale, 1e-6);
  // CpuAdam's AVX2/AVX-512 builds round as the kernel does (optim/adam_formula.h, fused form).
  if (zt::optim::best_simd_path() != zt::optim::SimdPath::kScalar) {
    EXPECT_TRUE(torch::equal(got, cpu_master)) << "not bit for bit with CpuAdam's fused path";
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    torch::Tensor mine = got.narrow(0, groups[i].begin, groups[i].end - groups[i].begin);
    EXPECT_TRUE(torch::equal(gpu_half.cpu().narrow(0, groups[i].begin, mine.numel()),
                             mine.to(torch::kBFloat16)));
    if (adamw) {
      EXPECT_LT((mine - ref[i].detach()).abs().max().item<double>() / scale, 1e-6) << i;
    }
  }
  // Padding untouched.
  EXPECT_TRUE(torch::equal(got.narrow(0, 0, 2), master.narrow(0, 0, 2)));
  EXPECT_EQ(gpu->state_bytes(), 8 * n);
}

INSTANTIATE_TEST_SUITE_P(Modes, FusedAdamCuda, testing::Values(true, false));

}  // namespace
