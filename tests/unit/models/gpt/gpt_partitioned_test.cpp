// The GPT example built partitioned (core/zero/partitioned_init.h) holds the values of a whole
// construction with the same seed, bit for bit, and trains identically at stage 3 (one rank here;
// tests/multirank/core/engine/partitioned_init_test.cpp covers 2 and 3 ranks, and
// examples.gpt_train_loss_decreases runs train_gpt partitioned on 2).

#include <map>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/engine.h"
#include "models/gpt/gpt_model.h"
#include "parallel/dist.h"
#include "tests/support/full_parameters.h"

namespace zt::models {
namespace {

GptShape shape() {
  GptShape s;
  s.n_layer = 3;
  s.n_head = 2;
  s.d_model = 16;
  s.vocab_size = 40;
  s.max_seq_len = 8;
  return s;
}

struct Built {
  Gpt model{nullptr};
  std::unique_ptr<Engine> engine;
};

Built build(bool partitioned) {
  auto comm = dist::create_communicator(dist::CommOptions{}, dist::Env::from_map({}));
  auto parts = partitioned ? std::make_shared<zero::PartitionedInit>(zero::PartitionOptions{
                                 .reduce_bucket_size = 500, .persistence_threshold = 20})
                           : nullptr;
  torch::manual_seed(7);
  Built r;
  r.model = Gpt(shape(), parts.get());
  EngineOptions o;
  o.stage = 3;
  o.units = r.model->unit_names();
  o.reduce_bucket_size = 500;
  o.stage3_param_persistence_threshold = 20;
  o.compute_dtype = at::kBFloat16;
  r.engine = std::make_unique<Engine>(r.model.ptr(), o, comm, parts);
  return r;
}

TEST(GptPartitioned, SameValuesAndTrainingAsWholeConstruction) {
  Built whole = build(false), parted = build(true);
  for (int step = 0; step < 3; ++step) {
    torch::manual_seed(50 + step);
    torch::Tensor ids = torch::randint(0, 40, {2, 8}, torch::kLong);
    double losses[2];
    Built* runs[2] = {&whole, &parted};
    for (int i = 0; i < 2; ++i) {
      Built& r = *runs[i];
      torch::Tensor loss = r.engine->forward(
          [&] { return GptImpl::loss(r.model->forward(ids, {}), ids.roll(-1, 1)); });
      r.engine->backward(loss);
      r.engine->step();
      losses[i] = loss.item<double>();
    }
    EXPECT_EQ(losses[0], losses[1]) << "step " << step;
  }
  auto a = testing::full_parameters(*whole.engine), b = testing::full_parameters(*parted.engine);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_TRUE(torch::equal(t, b.at(name))) << name;
}

}  // namespace
}  // namespace zt::models
