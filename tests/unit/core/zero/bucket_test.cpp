// core/zero/bucket.h and sharded_step.h's placement rule, in one process. The multi-rank
// behaviour (equivalence with single-process training) is tests/multirank/core/engine.

#include "core/zero/bucket.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/engine.h"
#include "core/zero/host_caching_allocator.h"
#include "core/zero/sharded_step.h"
#include "parallel/dist.h"

namespace zt::zero {
namespace {

std::vector<std::pair<std::string, at::Tensor>> params(const std::vector<int64_t>& sizes) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    out.emplace_back("p" + std::to_string(i), torch::randn({sizes[i]}));
  }
  return out;
}

BucketOptions options(int stage, int rank, int world) {
  BucketOptions o;
  o.stage = stage;
  o.rank = rank;
  o.world = world;
  return o;
}

TEST(Bucket, SteppedRangeIsTheWholeBufferAtStage0AndTheOwnedSliceAbove) {
  for (int stage : {0, 1, 2, 3}) {
    for (int rank : {0, 1, 2}) {
      Bucket b(dist::FlatLayout(params({3, 5, 2}), 3), 0, options(stage, rank, 3));
      const dist::Range r = b.stepped();
      if (stage == 0) {
        EXPECT_EQ(r.begin, 0);
        EXPECT_EQ(r.end, 12);
      } else {
        EXPECT_EQ(r.begin, 4 * rank) << "stage " << stage;
        EXPECT_EQ(r.size(), 4);
      }
      b.keep_shard();
      EXPECT_EQ(b.param_target().numel(), r.size()) << "stage " << stage << " rank " << rank;
      // Stage 3 steps a shard of its own; below, the stepped range of the full buffer itself.
      EXPECT_EQ(b.sharded(), stage == 3);
      const auto* full = static_cast<const char*>(b.params().data_ptr());
      const auto* target = static_cast<const char*>(b.param_target().data_ptr());
      EXPECT_EQ(target >= full && target < full + b.params().nbytes(), stage != 3);
    }
  }
}

TEST(Bucket, GradientBufferFollowsTheStage) {
  for (int stage : {0, 1, 2, 3}) {
    Bucket b(dist::FlatLayout(params({3, 5, 2}), 4), 0, options(stage, 1, 4));
    // 10 elements over 4 ranks pad to 12: stages 0-1 keep the full padded gradient (12 floats),
    // stages 2-3 only the owned slice (3).
    EXPECT_EQ(b.grad_bytes(), (stage <= 1 ? 12 : 3) * 4) << "stage " << stage;
  }
}

TEST(Bucket, CompletesWhenEveryParameterReportedAndReducesInOneRank) {
  auto comm = dist::create_communicator(dist::CommOptions{}, dist::Env::from_map({}));
  WaitClock clock;
  for (int stage : {0, 1, 2, 3}) {
    Bucket b(dist::FlatLayout(params({3, 5}), 1), 0, options(stage, 0, 1));
    EXPECT_FALSE(b.add_grad(1, torch::full({5}, 2.0f)));
    EXPECT_FALSE(b.complete());
    EXPECT_TRUE(b.add_grad(0, torch::full({3}, 1.0f)));
    b.start_grad_sync(*comm);
    b.finish_grad_sync(clock);
    at::Tensor want = torch::cat({torch::full({3}, 1.0f), torch::full({5}, 2.0f)});
    EXPECT_TRUE(torch::equal(b.owned_grad(), want)) << "stage " << stage;
    b.zero_grads();
    if (stage == 0) {
      EXPECT_EQ(b.owned_grad().abs().sum().item<float>(), 0.0f);
    } else {  // nothing reduced in the new window yet
      EXPECT_FALSE(b.owned_grad().defined()) << "stage " << stage;
    }
  }
}

TEST(Bucket, AReleasedGradientShardHoldsBytesOnlyFromItsReductionToZeroGrads) {
  // A CPU model's buckets (release_grad_shard): the shard's bytes go back to the host cache at
  // zero_grads, where the next forward's activations can use them, and return at the reduction.
  auto comm = dist::create_communicator(dist::CommOptions{}, dist::Env::from_map({}));
  WaitClock clock;
  acquire_host_cache();
  for (int stage : {2, 3}) {
    BucketOptions o = options(stage, 0, 1);
    o.release_grad_shard = true;
    Bucket b(dist::FlatLayout(params({40000, 30000}), 1), 0, o);
    const size_t shard_bytes = host_cache_class(70000 * sizeof(float));
    for (int window = 0; window < 2; ++window) {
      const float v = 1.0f + static_cast<float>(window);
      b.add_grad(0, torch::full({40000}, v));
      b.add_grad(1, torch::full({30000}, 2 * v));
      b.start_grad_sync(*comm);
      b.finish_grad_sync(clock);
      at::Tensor want = torch::cat({torch::full({40000}, v), torch::full({30000}, 2 * v)});
      EXPECT_TRUE(torch::equal(b.owned_grad(), want)) << "stage " << stage << " window " << window;
      const size_t live = host_cache_stats().live_bytes;
      b.zero_grads();
      b.next_micro_step();
      EXPECT_EQ(host_cache_stats().live_bytes, live - shard_bytes) << "stage " << stage;
    }
  }
  release_host_cache();
}

TEST(Bucket, CommunicationDtypeAndPreScaleApplyToTheReduction) {
  auto comm = dist::create_communicator(dist::CommOptions{}, dist::Env::from_map({}));
  WaitClock clock;
  BucketOptions o = options(2, 0, 1);
  o.comm_dtype = at::kBFloat16;
  o.pre_reduce_scale = 0.5;
  Bucket b(dist::FlatLayout(params({4}), 1), 0, o);
  // 1 + 2^-12 is not representable in bf16: the reduction really ran in bf16.
  b.add_grad(0, torch::full({4}, 1.0f + 1.0f / 4096));
  b.start_grad_sync(*comm);
  b.finish_grad_sync(clock);
  EXPECT_EQ(b.owned_grad().scalar_type(), at::kFloat) << "accumulation stays fp32";
  EXPECT_TRUE(torch::equal(b.owned_grad(), torch::full({4}, 0.5f)));
}

TEST(Bucket, Stage3ReleaseAndGatherRestoreTheParameters) {
  auto comm = dist::create_communicator(dist::CommOptions{}, dist::Env::from_map({}));
  WaitClock clock;
  auto ps = params({3, 5});
  at::Tensor p1 = ps[1].second, before = p1.clone();
  Bucket b(dist::FlatLayout(ps, 1), 0, options(3, 0, 1));
  b.keep_shard();
  EXPECT_EQ(b.release_params(clock), 8 * 4);
  EXPECT_FALSE(b.gathered());
  EXPECT_EQ(b.params().storage().nbytes(), 0u) << "the bytes are really freed";
  EXPECT_EQ(b.start_param_gather(*comm), 8 * 4);
  b.finish_param_gather(clock);
  EXPECT_TRUE(b.gathered());
  EXPECT_TRUE(torch::equal(p1, before)) << "the parameter view sees the gathered values";
}

TEST(MasterDevice, FollowsTheParametersUnlessOffloaded) {
  const c10::Device gpu(c10::DeviceType::CUDA, 1);
  EXPECT_EQ(master_device(gpu, /*offload_optimizer=*/false), gpu);
  EXPECT_EQ(master_device(gpu, /*offload_optimizer=*/true), c10::Device(at::kCPU));
  EXPECT_EQ(master_device(c10::Device(at::kCPU), false), c10::Device(at::kCPU));
}

// wall_clock_breakdown: one line per steps_per_print optimizer steps, on rank 0, with the four
// phases DeepSpeed's breakdown names.
TEST(WallClockBreakdown, LogsEveryStepsPerPrintSteps) {
  auto comm = dist::create_communicator(dist::CommOptions{}, dist::Env::from_map({}));
  torch::manual_seed(0);
  auto model = torch::nn::Linear(4, 2);
  EngineOptions o;
  o.optimizer.type = zt::optim::OptimizerKind::kAdamW;
  o.wall_clock_breakdown = true;
  o.steps_per_print = 2;
  Engine engine(model.ptr(), o, comm);
  testing::internal::CaptureStderr();
  for (int s = 0; s < 5; ++s) {
    at::Tensor loss = engine.forward([&] { return model->forward(torch::randn({3, 4})).sum(); });
    engine.backward(loss);
    engine.step();
  }
  const std::string log = testing::internal::GetCapturedStderr();
  size_t lines = 0;
  for (size_t pos = log.find("time (ms/step)"); pos != std::string::npos;
       pos = log.find("time (ms/step)", pos + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 2u) << log;  // after steps 2 and 4
  for (const char* phase : {"forward", "backward", "step", "comm wait"}) {
    EXPECT_NE(log.find(phase), std::string::npos) << phase << " missing in: " << log;
  }
}

}  // namespace
}  // namespace zt::zero
