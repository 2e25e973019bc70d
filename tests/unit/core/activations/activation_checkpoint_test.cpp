// zt::checkpoint_activations against the same calls without checkpointing: equal gradients
// (dropout included, so the recompute must replay the RNG), the recompute really happens (the
// wrapped function runs twice), number_checkpoints limits it to the first N calls of a forward
// pass, what backward keeps is only the inputs, and an undefined input (an absent mask) reaches the
// call in its place.
#include "core/activations/activation_checkpoint.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace zt {
namespace {

struct Mlp : torch::nn::Module {
  Mlp() {
    fc = register_module("fc", torch::nn::Linear(8, 32));
    out = register_module("out", torch::nn::Linear(32, 8));
  }
  torch::Tensor body(const torch::Tensor& x, const torch::Tensor& scale) {
    ++runs;
    torch::Tensor h = torch::dropout(torch::gelu(fc->forward(x)), 0.3, /*train=*/true);
    return x + out->forward(h) * scale;
  }
  torch::nn::Linear fc{nullptr}, out{nullptr};
  int runs = 0;
};

struct Stack {
  explicit Stack(int n) {
    torch::manual_seed(7);
    for (int i = 0; i < n; ++i) layers.push_back(std::make_shared<Mlp>());
  }
  // Sum of the output after every layer, checkpointed or not; `scale` carries no gradient.
  torch::Tensor run(torch::Tensor x, bool checkpoint) {
    begin_checkpointed_forward();
    const torch::Tensor scale = torch::full({1}, 0.5);
    for (auto& l : layers) {
      Mlp* m = l.get();
      x = checkpoint ? checkpoint_activations(
                           [m](const std::vector<at::Tensor>& in) { return m->body(in[0], in[1]); },
                           {x, scale})
                     : m->body(x, scale);
    }
    return x.pow(2).sum();
  }
  std::vector<torch::Tensor> grads() {
    std::vector<torch::Tensor> g;
    for (auto& l : layers) {
      for (auto& p : l->parameters()) {
        g.push_back(p.grad().clone());
        p.mutable_grad() = torch::Tensor();
      }
    }
    return g;
  }
  int runs() const {
    int n = 0;
    for (auto& l : layers) n += l->runs;
    return n;
  }
  std::vector<std::shared_ptr<Mlp>> layers;
};

class ActivationCheckpointTest : public ::testing::Test {
 protected:
  void TearDown() override { configure_activation_checkpointing({}); }
};

TEST_F(ActivationCheckpointTest, GradientsEqualPlainBackwardAndForwardRunsTwice) {
  Stack s(3);
  torch::manual_seed(1);
  torch::Tensor x = torch::randn({4, 8}, torch::requires_grad());
  torch::manual_seed(2);
  s.run(x, false).backward();
  const auto want = s.grads();
  const torch::Tensor want_x = x.grad().clone();
  x.mutable_grad() = torch::Tensor();
  EXPECT_EQ(s.runs(), 3);

  torch::manual_seed(2);  // the same dropout masks, drawn in forward and replayed in backward
  torch::Tensor loss = s.run(x, true);
  EXPECT_EQ(s.runs(), 6);
  EXPECT_EQ(checkpoint_counts().checkpointed, 3);
  loss.backward();
  EXPECT_EQ(s.runs(), 9);  // every layer ran again in backward
  const auto got = s.grads();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << i;
  EXPECT_TRUE(torch::equal(x.grad(), want_x));
}

TEST_F(ActivationCheckpointTest, NumberCheckpointsLimitsToTheFirstCallsOfEachPass) {
  configure_activation_checkpointing({/*number_checkpoints=*/2, /*cpu_checkpointing=*/false});
  Stack s(4);
  torch::Tensor x = torch::randn({2, 8}, torch::requires_grad());
  torch::manual_seed(3);
  s.run(x, false).backward();
  const auto want = s.grads();
  for (int pass = 0; pass < 2; ++pass) {  // the count starts again with every pass
    const int before = s.runs();
    torch::manual_seed(3);
    torch::Tensor loss = s.run(x, true);
    EXPECT_EQ(checkpoint_counts().calls, 4);
    EXPECT_EQ(checkpoint_counts().checkpointed, 2);
    loss.backward();
    EXPECT_EQ(s.runs() - before, 4 + 2);  // two layers recomputed
    const auto got = s.grads();
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << i;
  }
}

TEST_F(ActivationCheckpointTest, CpuCheckpointingOnAHostModelTrainsTheSame) {
  configure_activation_checkpointing({std::nullopt, /*cpu_checkpointing=*/true});
  Stack s(2);
  torch::Tensor x = torch::randn({3, 8}, torch::requires_grad());
  torch::manual_seed(4);
  s.run(x, false).backward();
  const auto want = s.grads();
  torch::manual_seed(4);
  s.run(x, true).backward();
  const auto got = s.grads();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << i;
}

TEST_F(ActivationCheckpointTest, KeepsOnlyTheInputsForBackward) {
  // The graph of a checkpointed call holds its inputs, not the 32-wide hidden activations: the
  // output's grad_fn is the checkpoint node, whose only saved variables are the inputs.
  Stack s(1);
  torch::Tensor x = torch::randn({4, 8}, torch::requires_grad());
  const torch::Tensor scale = torch::full({1}, 0.5);
  Mlp* m = s.layers[0].get();
  torch::Tensor y = checkpoint_activations(
      [m](const std::vector<at::Tensor>& in) { return m->body(in[0], in[1]); }, {x, scale});
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(y.grad_fn()->next_edges().size(), 2u);  // x and scale (which needs no gradient)
  ASSERT_TRUE(y.grad_fn()->next_edges()[0].function);
  EXPECT_EQ(y.grad_fn()->next_edges()[0].function->name(), "torch::autograd::AccumulateGrad");
  EXPECT_FALSE(y.grad_fn()->next_edges()[1].is_valid());
}

TEST_F(ActivationCheckpointTest, UndefinedInputsReachTheCallInTheirPlaces) {
  // An absent mask (undefined) between inputs: the call sees it undefined, in forward and in the
  // recompute, and the gradients are those of the plain call.
  Stack s(1);
  Mlp* m = s.layers[0].get();
  auto fn = [m](const std::vector<at::Tensor>& in) {
    EXPECT_EQ(in.size(), 3u);
    EXPECT_FALSE(in[1].defined());
    return m->body(in[0], in[2]);
  };
  torch::Tensor x = torch::randn({4, 8}, torch::requires_grad());
  const torch::Tensor scale = torch::full({1}, 0.5);
  torch::manual_seed(5);
  m->body(x, scale).pow(2).sum().backward();
  const auto want = s.grads();
  const torch::Tensor want_x = x.grad().clone();
  x.mutable_grad() = torch::Tensor();
  torch::manual_seed(5);
  checkpoint_activations(fn, {x, torch::Tensor(), scale}).pow(2).sum().backward();
  EXPECT_EQ(m->runs, 3);  // plain, checkpointed forward, recompute
  const auto got = s.grads();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << i;
  EXPECT_TRUE(torch::equal(x.grad(), want_x));
}

TEST_F(ActivationCheckpointTest, WithoutGradOrGradInputsTheCallSimplyRuns) {
  Stack s(1);
  Mlp* m = s.layers[0].get();
  auto fn = [m](const std::vector<at::Tensor>& in) { return m->body(in[0], in[1]); };
  const torch::Tensor scale = torch::full({1}, 0.5);
  {
    torch::NoGradGuard no_grad;
    EXPECT_FALSE(checkpoint_activations(fn, {torch::randn({2, 8}), scale}).requires_grad());
  }
  // No input requires grad: run plainly, so the parameters still get their gradients.
  torch::Tensor y = checkpoint_activations(fn, {torch::randn({2, 8}), scale});
  y.sum().backward();
  EXPECT_TRUE(m->fc->weight.grad().defined());
  EXPECT_EQ(m->runs, 2);
}

}  // namespace
}  // namespace zt
