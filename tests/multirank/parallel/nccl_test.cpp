// The nccl backend on CUDA tensors under mpirun (one GPU per rank). Skips, saying why, where the
// CUDA plugin or enough GPUs are missing. Checks every collective against closed forms, the
// stream ordering of wait() (a kernel on LibTorch's current stream after wait() sees the result
// without a host synchronisation) and a barrier.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include "base/error.h"
#include "parallel/dist.h"
#include "parallel/groups.h"
#include "parallel/nccl_communicator.h"

namespace zt::dist {
namespace {

std::shared_ptr<Communicator> g_comm;
std::string g_skip;

at::Tensor pattern(int64_t n, at::ScalarType type, int64_t offset = 0) {
  return (at::arange(offset, offset + n, at::kLong) % 7 + 1).to(type);
}

class Nccl : public testing::TestWithParam<at::ScalarType> {
 protected:
  void SetUp() override {
    if (!g_skip.empty()) GTEST_SKIP() << g_skip;
  }
};

TEST_P(Nccl, AllCollectives) {
  Communicator& c = *g_comm;
  const int w = c.size(), r = c.rank();
  const at::ScalarType type = GetParam();
  const auto cuda = at::TensorOptions().device(at::kCUDA, c10::DeviceIndex(0));
  const int64_t n = 1001;
  at::Tensor t = (pattern(n, type) * (r + 1)).to(cuda.device());
  c.all_reduce(t)->wait();
  // wait() ordered the current stream: this copy to the host runs after the all-reduce.
  EXPECT_TRUE(at::equal(t.cpu(), (pattern(n, at::kDouble) * (w * (w + 1) / 2)).to(type)));

  at::Tensor in = (pattern(n * w, type) * (r + 1)).to(cuda.device());
  at::Tensor out = at::empty({n}, cuda.dtype(type));
  c.reduce_scatter(in, out, ReduceOp::kMax)->wait();
  EXPECT_TRUE(at::equal(out.cpu(), (pattern(n, at::kDouble, r * n) * w).to(type)));

  at::Tensor shard = (pattern(n, type) * (r + 1)).to(cuda.device());
  at::Tensor flat = at::empty({n * w}, cuda.dtype(type));
  c.all_gather(shard, flat)->wait();
  for (int q = 0; q < w; ++q) {
    EXPECT_TRUE(at::equal(flat.narrow(0, q * n, n).cpu(), pattern(n, type) * (q + 1)));
  }
  at::Tensor b = r == 0 ? pattern(n, type).to(cuda.device()) : at::zeros({n}, cuda.dtype(type));
  c.broadcast(b, 0)->wait();
  EXPECT_TRUE(at::equal(b.cpu(), pattern(n, type)));

  at::Tensor send = (pattern(n * w, type) * (r + 1)).to(cuda.device());
  at::Tensor recv = at::empty({n * w}, cuda.dtype(type));
  c.all_to_all(send, recv)->wait();
  for (int q = 0; q < w; ++q) {
    EXPECT_TRUE(at::equal(recv.narrow(0, q * n, n).cpu(), pattern(n, type, r * n) * (q + 1)));
  }
  c.barrier()->wait();
}

// ncclCommSplit: each rank alone, then everyone in reverse order; both reduce among themselves.
TEST_P(Nccl, SplitPartitions) {
  Communicator& c = *g_comm;
  const int w = c.size(), r = c.rank();
  const at::ScalarType type = GetParam();
  const auto cuda = at::TensorOptions().device(at::kCUDA, c10::DeviceIndex(0)).dtype(type);
  std::vector<std::vector<int>> alone;
  for (int q = 0; q < w; ++q) alone.push_back({q});
  std::shared_ptr<Communicator> self = split_partition(c, alone);
  ASSERT_EQ(self->size(), 1);
  at::Tensor t = at::full({7}, r + 1, cuda);
  self->all_reduce(t)->wait();
  EXPECT_TRUE(at::equal(t.cpu(), at::full({7}, r + 1, type)));
  std::vector<int> reversed;
  for (int q = w - 1; q >= 0; --q) reversed.push_back(q);
  std::shared_ptr<Communicator> back = c.split(reversed);
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(back->rank(), w - 1 - r);
  at::Tensor shard = at::full({3}, r + 1, cuda), flat = at::empty({3 * w}, cuda);
  back->all_gather(shard, flat)->wait();
  for (int i = 0; i < w; ++i)
    EXPECT_TRUE(at::equal(flat.narrow(0, 3 * i, 3).cpu(), at::full({3}, w - i, type)));
  c.barrier()->wait();
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Nccl,
                         testing::Values(at::kFloat, at::kHalf, at::kBFloat16, at::kInt, at::kLong),
                         [](const testing::TestParamInfo<at::ScalarType>& i) {
                           return std::string(c10::toString(i.param));
                         });

}  // namespace
}  // namespace zt::dist

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  int provided = 0;
  // The job store bootstraps over MPI from zerotorch's progress thread: at least SERIALIZED.
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int rc = 0;
  try {
    int devices = zt::dist::cuda_device_count();
    if (devices < world) {
      zt::dist::g_skip = "nccl test needs " + std::to_string(world) + " CUDA device(s), " +
                         std::to_string(devices) + " visible (or the CUDA plugin is missing)";
    } else {
      zt::dist::CommOptions options;
      options.backend = zt::dist::Backend::kNccl;
      options.cuda = true;
      options.timeout = std::chrono::seconds(120);
      zt::dist::g_comm = zt::dist::create_communicator(options);
    }
    rc = RUN_ALL_TESTS();
    zt::dist::g_comm.reset();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zt_parallel_nccl_test: error: %s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
