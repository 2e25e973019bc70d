// A process without any launcher gets a working 1-rank communicator from every CPU backend, so
// unit tests and single-process training need no mpirun/torchrun.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "base/error.h"
#include "parallel/dist.h"
#include "parallel/nccl_communicator.h"
#include "parallel/recording_communicator.h"

namespace zt::dist {
namespace {

class SingleProcess : public testing::TestWithParam<std::string> {};

const char* name_resolved(const CommOptions& options, const Env& env) {
  return backend_name(resolve_backend(options, env));
}

TEST_P(SingleProcess, EveryCollectiveIsTheIdentity) {
  CommOptions options;
  options.backend = parse_backend(GetParam());
  options.timeout = std::chrono::seconds(30);
  auto comm = create_communicator(options, Env::from_map({}));
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->backend(), GetParam());

  at::Tensor t = at::arange(10, at::kFloat);
  comm->all_reduce(t, ReduceOp::kAvg)->wait();
  EXPECT_TRUE(at::equal(t, at::arange(10, at::kFloat)));

  at::Tensor in = at::arange(6, at::kHalf);
  at::Tensor out = at::zeros({6}, at::kHalf);
  comm->reduce_scatter(in, out)->wait();
  EXPECT_TRUE(at::equal(out, in));

  at::Tensor shard = at::arange(4, at::kLong);
  at::Tensor flat = at::zeros({4}, at::kLong);
  comm->all_gather(shard, flat)->wait();
  EXPECT_TRUE(at::equal(flat, shard));

  at::Tensor b = at::full({3}, 7, at::kBFloat16);
  comm->broadcast(b, 0)->wait();
  EXPECT_TRUE(at::equal(b, at::full({3}, 7, at::kBFloat16)));
  WorkPtr w = comm->barrier();
  w->wait();
  EXPECT_TRUE(w->is_completed());
}

// With the flight recorder on, a collective whose wait() returned is completed, and nothing keeps
// it (or the tensors the backend made for it) once the caller lets go of its Work: gloo's
// reduce-scatter used to read as unfinished after its wait, so the recorder held every one of
// them, up to 1024, each with a copy of its input (a gradient bucket per step, for good).
TEST_P(SingleProcess, AWaitedCollectiveUnderTheRecorderIsCompletedAndLetGo) {
  CommOptions options;
  options.backend = parse_backend(GetParam());
  options.timeout = std::chrono::seconds(30);
  auto comm = record_collectives(create_communicator(options, Env::from_map({})),
                                 FlightOptions{.capacity = 8, .dir = ""}, {});
  ASSERT_NE(dynamic_cast<RecordingCommunicator*>(comm.get()), nullptr);
  at::Tensor in = at::arange(1 << 16, at::kFloat);
  at::Tensor out = at::zeros({1 << 16}, at::kFloat);
  for (int i = 0; i < 3; ++i) {
    WorkPtr w = comm->reduce_scatter(in, out);
    w->wait();
    EXPECT_TRUE(w->is_completed());
  }
  comm->barrier()->wait();  // the recorder polls what it still holds here
  EXPECT_EQ(in.storage().use_count(), 1);
  EXPECT_EQ(out.storage().use_count(), 1);
}

INSTANTIATE_TEST_SUITE_P(CpuBackends, SingleProcess, testing::Values("gloo", "mpi"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(CreateCommunicator, AutoPicksByLauncher) {
  CommOptions options;
  EXPECT_STREQ(name_resolved(options, Env::from_map({})), "gloo");
  EXPECT_STREQ(name_resolved(options, Env::from_map({{"OMPI_COMM_WORLD_RANK", "0"},
                                                     {"OMPI_COMM_WORLD_SIZE", "2"}})),
               "mpi");
  // ztrun --transport mpi: torchrun's names on top of OpenMPI's.
  EXPECT_STREQ(name_resolved(options, Env::from_map({{"RANK", "1"},
                                                     {"WORLD_SIZE", "2"},
                                                     {"OMPI_COMM_WORLD_RANK", "1"},
                                                     {"OMPI_COMM_WORLD_SIZE", "2"}})),
               "mpi");
  EXPECT_STREQ(name_resolved(options, Env::from_map({{"RANK", "0"},
                                                     {"WORLD_SIZE", "2"},
                                                     {"MASTER_ADDR", "127.0.0.1"},
                                                     {"MASTER_PORT", "29500"}})),
               "gloo");
  options.backend = Backend::kMpi;
  EXPECT_STREQ(name_resolved(options, Env::from_map({})), "mpi");
}

TEST(CreateCommunicator, RejectsUnknownBackendAndMissingRendezvous) {
  CommOptions options;
  try {
    parse_backend("tcp");
    FAIL() << "expected an error";
  } catch (const zt::Error& e) {
    EXPECT_NE(e.message().find("got 'tcp'"), std::string::npos) << e.what();
  }
  options.backend = Backend::kGloo;
  try {
    create_communicator(options, Env::from_map({{"RANK", "0"}, {"WORLD_SIZE", "2"}}));
    FAIL() << "expected an error";
  } catch (const zt::Error& e) {
    EXPECT_NE(e.message().find("MASTER_ADDR and MASTER_PORT"), std::string::npos) << e.what();
  }
  options.backend = Backend::kMpi;
  try {
    create_communicator(options, Env::from_map({{"RANK", "0"}, {"WORLD_SIZE", "2"}}));
    FAIL() << "expected an error";
  } catch (const zt::Error& e) {
    EXPECT_NE(e.message().find("mpirun"), std::string::npos) << e.what();
  }
}

TEST(CreateCommunicator, NcclWithoutGpuFailsWithReason) {
  CommOptions options;
  options.backend = Backend::kNccl;
  options.cuda = true;
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present; covered by the nccl tests";
  try {
    create_communicator(options, Env::from_map({}));
    FAIL() << "expected an error";
  } catch (const zt::Error& e) {
    EXPECT_NE(e.message().find("nccl"), std::string::npos) << e.what();
  }
  options.backend = Backend::kAuto;
  EXPECT_STREQ(name_resolved(options, Env::from_map({})), "gloo");
}

}  // namespace
}  // namespace zt::dist
