// The tiled MLP (models/tiled_mlp.h) against the LLaMA MLP untiled: the same output and the same
// gradients of the input and of every weight, for tiles that do not divide the sequence, one
// position per tile, and one tile for all; each weight's gradient is accumulated once per backward
// (its post-accumulate hook, which ZeRO's reduction hangs on, core/zero/grad_sync.cpp, fires
// once); without gradients the whole sequence runs at once.
#include "models/tiled_mlp.h"

#include <gtest/gtest.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include "base/error.h"
#include "models/llama/llama_layers.h"

namespace zt::models {
namespace {

// Counts the accumulations into a parameter's .grad.
class CountAccumulations : public torch::autograd::PostAccumulateGradHook {
 public:
  explicit CountAccumulations(int* count) : count_(count) {}
  void operator()(const torch::autograd::Variable& /*param*/) override { ++*count_; }

 private:
  int* count_;
};

struct MlpGrads {
  torch::Tensor out, x, gate, up, down, down_bias;
  int accumulations = 0;  // into gate_proj.weight's .grad
};

MlpGrads run_mlp(int64_t tile) {
  LlamaShape s;
  s.hidden_size = 12;
  s.intermediate_size = 20;
  s.mlp_bias = true;
  s.mlp_tile_tokens = tile;
  torch::manual_seed(5);
  LlamaMlp mlp(s);
  MlpGrads g;
  torch::autograd::impl::set_post_acc_grad_hooks(
      mlp->gate_proj->weight, std::make_unique<CountAccumulations>(&g.accumulations));
  torch::Tensor x = torch::randn({2, 11, 12}).requires_grad_();
  torch::Tensor out = mlp->forward(x);
  (out * torch::linspace(-1, 1, 12)).sum().backward();
  g.out = out.detach();
  g.x = x.grad();
  g.gate = mlp->gate_proj->weight.grad();
  g.up = mlp->up_proj->weight.grad();
  g.down = mlp->down_proj->weight.grad();
  g.down_bias = mlp->down_proj->bias.grad();
  return g;
}

TEST(TiledMlp, EqualsTheWholeMlpInFp32) {
  const MlpGrads want = run_mlp(0);
  for (int64_t tile : {1, 3, 4, 11, 64}) {
    const MlpGrads got = run_mlp(tile);
    EXPECT_EQ(got.accumulations, 1) << "tile " << tile;
    EXPECT_TRUE(torch::allclose(got.out, want.out, 1e-6, 1e-7)) << "tile " << tile;
    for (const auto& [name, a, b] :
         {std::tuple{"input", got.x, want.x}, std::tuple{"gate", got.gate, want.gate},
          std::tuple{"up", got.up, want.up}, std::tuple{"down", got.down, want.down},
          std::tuple{"down bias", got.down_bias, want.down_bias}}) {
      ASSERT_TRUE(a.defined()) << name << ", tile " << tile;
      EXPECT_TRUE(torch::allclose(a, b, 1e-5, 1e-7))
          << name << ", tile " << tile << ": " << (a - b).abs().max().item<double>();
    }
  }
}

TEST(TiledMlp, WithoutGradientsTheWholeSequenceRunsAtOnce) {
  LlamaShape s;
  s.hidden_size = 8;
  s.intermediate_size = 12;
  s.mlp_tile_tokens = 2;
  LlamaMlp mlp(s);
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::randn({1, 5, 8});
  const torch::Tensor out = mlp->forward(x);
  EXPECT_FALSE(out.requires_grad());
  EXPECT_EQ(out.sizes(), x.sizes());
}

TEST(TiledMlp, ATileOfNoPositionsIsRefused) {
  LlamaShape s;
  s.hidden_size = 8;
  s.intermediate_size = 12;
  LlamaMlp mlp(s);
  EXPECT_THROW(tiled_over_positions(
                   *mlp, [](const torch::Tensor& x) { return x; },
                   torch::randn({1, 4, 8}, torch::requires_grad()), 0),
               zt::Error);
}

}  // namespace
}  // namespace zt::models
