// The comms logger's totals for one optimizer step equal the bytes the engine's collectives must
// move at each ZeRO stage, computed here from the flat-buffer layout (padded sizes) the engine
// reports. Message sizes are DeepSpeed's (parallel/comms_logger.h): all_reduce its tensor,
// all_gather its input shard, reduce_scatter its full input. Per step, with fp32 and B buckets
// of padded sizes P_b (N ranks, 4 bytes per element):
//   stage 0  all_reduce of every bucket's gradient                   sum 4 P_b
//            (the gradient norm is local: every rank holds the reduced gradient)
//   stage 1  reduce_scatter of every bucket's gradient               sum 4 P_b
//   stage 2  all_gather publishing every updated shard               sum 4 P_b / N
//            all_reduce of the gradient norm's sum of squares        8 (one double)
//   stage 3  all_gather of the root unit's buckets once (it stays gathered through backward),
//            and of each declared unit's buckets twice (forward, and again for its backward);
//            reduce_scatter of every bucket; the norm's all_reduce; no publish (parameters
//            stay sharded)
// The first step also broadcasts the order in which buckets completed (grad_sync.h); it is
// left out by counting from the second step on.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/engine.h"
#include "core/zero/call_unit.h"
#include "parallel/recording_communicator.h"
#include "tests/support/mpi_world.h"

namespace zt {
namespace {

struct TwoUnitsImpl : torch::nn::Module {
  TwoUnitsImpl() {
    embed = register_module("embed", torch::nn::Linear(5, 12));
    u0 = register_module("u0", torch::nn::Linear(12, 12));
    u1 = register_module("u1", torch::nn::Linear(12, 12));
    head = register_module("head", torch::nn::Linear(12, 3));
  }
  // x: (B, 5) -> (B, 3)
  torch::Tensor forward(torch::Tensor x) {
    x = torch::tanh(embed->forward(x));
    x = torch::tanh(zt::call_unit(*u0, x));
    x = torch::tanh(zt::call_unit(*u1, x));
    return head->forward(x);
  }
  torch::nn::Linear embed{nullptr}, u0{nullptr}, u1{nullptr}, head{nullptr};
};
TORCH_MODULE(TwoUnits);

using Totals = std::map<std::string, int64_t>;  // op -> bytes

Totals logged(dist::CommsLogger& log) {
  Totals t;
  for (const auto& [op, row] : log.per_op()) t[op] = row.total_bytes;
  return t;
}

// Which unit a flat buffer belongs to: its parameters' name prefix ("" = the root unit).
std::string unit_of(const dist::FlatLayout& layout) {
  const std::string& name = layout.entries().front().name;
  for (const char* unit : {"u0", "u1"}) {
    if (name.rfind(std::string(unit) + ".", 0) == 0) return unit;
  }
  return "";
}

// reuse: stage3_max_reuse_distance. At DeepSpeed's default every unit of this small model is used
// again well within it, so each is gathered once, for its forward, and kept for its backward; at
// 0 each is released after its forward and gathered again for its backward. The root (no unit)
// stays gathered through both.
Totals expected(Engine& engine, int stage, int64_t reuse, int n) {
  Totals t;
  for (const Engine::ShardState& s : engine.shard_states()) {
    const int64_t full = 4 * s.layout->padded_numel(), shard = full / n;
    switch (stage) {
      case 0: t["all_reduce"] += full; break;
      case 1:
      case 2:
        t["reduce_scatter"] += full;
        t["all_gather"] += shard;
        break;
      default:
        t["reduce_scatter"] += full;
        t["all_gather"] += (unit_of(*s.layout).empty() || reuse > 0 ? 1 : 2) * shard;
    }
  }
  if (stage > 0) t["all_reduce"] += 8;
  return t;
}

struct Case {
  int stage;
  int64_t reuse;  // stage3_max_reuse_distance
};

class CommsLoggerBytes : public ::testing::TestWithParam<Case> {};

TEST_P(CommsLoggerBytes, OneStepMovesWhatTheLayoutPredicts) {
  const int stage = GetParam().stage;
  const int64_t reuse = GetParam().reuse;
  auto world = testing::mpi_world();
  dist::CommsLoggerOptions on;
  on.enabled = true;
  auto comm = dist::record_collectives(world, dist::FlightOptions{.capacity = 0}, on);
  dist::CommsLogger& log = *dist::comms_logger_of(*comm);

  torch::manual_seed(3);
  EngineOptions o;
  o.stage = stage;
  o.reduce_bucket_size = 100;  // several buckets, some parameters alone in theirs
  o.stage3_prefetch_bucket_size = 0;
  o.stage3_param_persistence_threshold = 0;
  o.stage3_max_reuse_distance = reuse;
  o.units = {"u0", "u1"};
  o.optimizer.type = optim::OptimizerKind::kAdamW;
  auto model = TwoUnits();
  Engine engine(model.ptr(), o, comm);
  auto step = [&] {
    torch::Tensor loss = engine.forward([&] {
      return model->forward(torch::randn({4, 5})).square().mean();
    });
    engine.backward(loss);
    engine.step();
  };
  step();
  log.reset();
  step();
  const Totals want = expected(engine, stage, reuse, comm->size());
  EXPECT_EQ(logged(log), want) << "stage " << stage << ", stage3_max_reuse_distance " << reuse
                               << "\n"
                               << log.table();
  if (comm->rank() == 0 && stage == 3) std::cout << log.table();
}

constexpr int64_t kDefaultReuse = 1'000'000'000;
INSTANTIATE_TEST_SUITE_P(Stages, CommsLoggerBytes,
                         ::testing::Values(Case{0, kDefaultReuse}, Case{1, kDefaultReuse},
                                           Case{2, kDefaultReuse}, Case{3, kDefaultReuse},
                                           Case{3, 0}));

}  // namespace
}  // namespace zt
