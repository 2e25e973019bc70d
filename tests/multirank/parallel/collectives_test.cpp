// Every collective of a backend under real processes (mpirun -np 1..4): dtypes fp32, fp16, bf16,
// int32, int64; sizes 0, 1, odd and 64 MiB; async overlap; sub-groups (a partition, node and
// hybrid layouts); and a rank that never joins, which must turn into the timeout error within
// the timeout on the others.
//
// Values are closed forms each rank computes alone: rank r contributes (r + 1) * pattern(i) with
// pattern(i) = i % 7 + 1, small integers, exact in every dtype (also after sums of 4 ranks and
// the halves of an average), so results are compared exactly.
//
// Usage: zt_parallel_collectives_test [--backend=mpi|gloo] [--mpi-mode=auto|nonblocking|blocking]
//        [gtest flags]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "base/error.h"
#include "base/main_guard.h"
#include "parallel/dist.h"
#include "parallel/groups.h"

namespace zt::dist {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

std::string g_backend = "mpi";
std::string g_mpi_mode = "auto";
std::shared_ptr<Communicator> g_comm;

Communicator& comm() {
  return *g_comm;
}

at::Tensor pattern(int64_t n, at::ScalarType type, int64_t offset = 0) {
  return (at::arange(offset, offset + n, at::kLong) % 7 + 1).to(type);
}

// Rank r's contribution.
at::Tensor contribution(int r, int64_t n, at::ScalarType type, int64_t offset = 0) {
  return pattern(n, type, offset) * (r + 1);
}

void expect_equal(const at::Tensor& actual, const at::Tensor& expected, const std::string& what) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  ASSERT_EQ(actual.scalar_type(), expected.scalar_type()) << what;
  EXPECT_TRUE(at::equal(actual, expected))
      << what << ": max abs diff "
      << (actual.to(at::kDouble) - expected.to(at::kDouble)).abs().max().item<double>();
}

struct Case {
  at::ScalarType type;
  int64_t numel;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  return std::string(c10::toString(info.param.type)) + "_n" + std::to_string(info.param.numel);
}

class Collectives : public testing::TestWithParam<Case> {};

TEST_P(Collectives, AllReduceSumMaxMinAvg) {
  const auto [type, n] = GetParam();
  const int w = comm().size();
  const int r = comm().rank();
  std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};
  if (at::isFloatingType(type)) ops.push_back(ReduceOp::kAvg);
  for (ReduceOp op : ops) {
    at::Tensor t = contribution(r, n, type);
    comm().all_reduce(t, op)->wait();
    double factor = op == ReduceOp::kSum   ? w * (w + 1) / 2.0
                    : op == ReduceOp::kMax ? w
                    : op == ReduceOp::kMin ? 1
                                           : (w + 1) / 2.0;
    expect_equal(t, (pattern(n, at::kDouble) * factor).to(type),
                 std::string("all_reduce ") + to_string(op));
  }
}

TEST_P(Collectives, ReduceScatterIntoShard) {
  const auto [type, n] = GetParam();
  const int w = comm().size();
  const int r = comm().rank();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    at::Tensor input = contribution(r, n * w, type);
    at::Tensor output = at::full({n}, -1, type);
    comm().reduce_scatter(input, output, op)->wait();
    double factor = op == ReduceOp::kSum ? w * (w + 1) / 2.0 : w;
    expect_equal(output, (pattern(n, at::kDouble, r * n) * factor).to(type),
                 std::string("reduce_scatter ") + to_string(op));
    // The input is the caller's: a backend may not leave partial sums in it that matter here,
    // but it must still hold its size.
    EXPECT_EQ(input.numel(), n * w);
  }
}

// ZeRO's layout: the output is this rank's own slice of the flat input (the mpi backend reduces
// each slice to its owner in place there, or reduce-scatters the whole buffer in place).
TEST_P(Collectives, ReduceScatterIntoOwnSliceOfInput) {
  const auto [type, n] = GetParam();
  const int w = comm().size();
  const int r = comm().rank();
  std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kMax};
  if (at::isFloatingType(type)) ops.push_back(ReduceOp::kAvg);
  for (ReduceOp op : ops) {
    at::Tensor flat = contribution(r, n * w, type);
    at::Tensor shard = flat.narrow(0, r * n, n);
    comm().reduce_scatter(flat, shard, op)->wait();
    double factor = op == ReduceOp::kSum   ? w * (w + 1) / 2.0
                    : op == ReduceOp::kMax ? w
                                           : (w + 1) / 2.0;
    expect_equal(shard, (pattern(n, at::kDouble, r * n) * factor).to(type),
                 std::string("aliased reduce_scatter ") + to_string(op));
  }
}

TEST_P(Collectives, AllGatherShards) {
  const auto [type, n] = GetParam();
  const int w = comm().size();
  const int r = comm().rank();
  at::Tensor input = contribution(r, n, type);
  at::Tensor output = at::full({n * w}, -1, type);
  comm().all_gather(input, output)->wait();
  for (int q = 0; q < w; ++q) {
    expect_equal(output.narrow(0, q * n, n), contribution(q, n, type),
                 "all_gather shard " + std::to_string(q));
  }
  // In place: this rank's shard already sits in the output (ZeRO's layout).
  at::Tensor flat = at::full({n * w}, -1, type);
  flat.narrow(0, r * n, n).copy_(contribution(r, n, type));
  at::Tensor shard = flat.narrow(0, r * n, n);
  comm().all_gather(shard, flat)->wait();
  for (int q = 0; q < w; ++q) {
    expect_equal(flat.narrow(0, q * n, n), contribution(q, n, type),
                 "in-place all_gather shard " + std::to_string(q));
  }
}

// Rank r sends chunk j = contribution(r) at offset j * n to rank j, so rank j receives from rank q
// the chunk at offset j * n scaled by q + 1.
TEST_P(Collectives, AllToAllExchangesChunks) {
  const auto [type, n] = GetParam();
  const int w = comm().size();
  const int r = comm().rank();
  at::Tensor input = contribution(r, n * w, type);
  at::Tensor output = at::full({n * w}, -1, type);
  comm().all_to_all(input, output)->wait();
  for (int q = 0; q < w; ++q) {
    expect_equal(output.narrow(0, q * n, n), contribution(q, n, type, r * n),
                 "all_to_all chunk from rank " + std::to_string(q));
  }
  EXPECT_TRUE(at::equal(input, contribution(r, n * w, type))) << "all_to_all changed its input";
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
  const auto [type, n] = GetParam();
  const int w = comm().size();
  const int r = comm().rank();
  for (int root = 0; root < w; ++root) {
    at::Tensor t = r == root ? contribution(root, n, type) : at::full({n}, -1, type);
    comm().broadcast(t, root)->wait();
    expect_equal(t, contribution(root, n, type), "broadcast root " + std::to_string(root));
  }
}

INSTANTIATE_TEST_SUITE_P(
    DtypesSizes, Collectives,
    testing::Values(Case{at::kFloat, 0}, Case{at::kFloat, 1}, Case{at::kFloat, 1001},
                    Case{at::kHalf, 0}, Case{at::kHalf, 1}, Case{at::kHalf, 1001},
                    Case{at::kBFloat16, 0}, Case{at::kBFloat16, 1}, Case{at::kBFloat16, 1001},
                    Case{at::kInt, 0}, Case{at::kInt, 1}, Case{at::kInt, 1001}, Case{at::kLong, 0},
                    Case{at::kLong, 1}, Case{at::kLong, 1001}),
    case_name);

// 64 MiB of fp32 per rank: the sizes a bucket or a layer's gather has; kept to two cases.
TEST(CollectivesLarge, AllReduceAndReduceScatter64MiB) {
  const int w = comm().size();
  const int r = comm().rank();
  const int64_t n = 16 * 1024 * 1024;  // 64 MiB of fp32
  at::Tensor t = contribution(r, n, at::kFloat);
  comm().all_reduce(t)->wait();
  expect_equal(t, pattern(n, at::kFloat) * (w * (w + 1) / 2), "64 MiB all_reduce");
  const int64_t shard = n / w;
  at::Tensor input = contribution(r, shard * w, at::kFloat);
  at::Tensor output = at::empty({shard}, at::kFloat);
  comm().reduce_scatter(input, output)->wait();
  expect_equal(output, pattern(shard, at::kFloat, r * shard) * (w * (w + 1) / 2),
               "64 MiB reduce_scatter");
}

TEST(CollectivesLarge, AllGather64MiB) {
  const int w = comm().size();
  const int r = comm().rank();
  const int64_t n = 16 * 1024 * 1024 / w;
  at::Tensor input = contribution(r, n, at::kFloat);
  at::Tensor output = at::empty({n * w}, at::kFloat);
  comm().all_gather(input, output)->wait();
  for (int q = 0; q < w; ++q) {
    expect_equal(output.narrow(0, q * n, n), contribution(q, n, at::kFloat),
                 "64 MiB all_gather shard " + std::to_string(q));
  }
}

// Several collectives in flight, waited in reverse order.
TEST(Async, TwoInFlightWaitedInReverse) {
  const int w = comm().size();
  const int r = comm().rank();
  const int64_t n = 100003;
  at::Tensor a = contribution(r, n, at::kFloat);
  at::Tensor in = contribution(r, n, at::kBFloat16);
  at::Tensor out = at::empty({n * w}, at::kBFloat16);
  at::Tensor c = contribution(r, 5, at::kLong);
  WorkPtr wa = comm().all_reduce(a);
  WorkPtr wb = comm().all_gather(in, out);
  WorkPtr wc = comm().all_reduce(c, ReduceOp::kMax);
  wc->wait();
  wb->wait();
  wa->wait();
  EXPECT_TRUE(wa->is_completed());
  expect_equal(a, pattern(n, at::kFloat) * (w * (w + 1) / 2), "first all_reduce");
  for (int q = 0; q < w; ++q) {
    expect_equal(out.narrow(0, q * n, n), contribution(q, n, at::kBFloat16), "all_gather");
  }
  expect_equal(c, pattern(5, at::kLong) * w, "max all_reduce");
}

// A started collective completes while the caller computes and never calls into the backend:
// the overlap the engine relies on (MPI: the progress thread; gloo: its worker threads).
TEST(Async, ProgressesWithoutWait) {
  const int w = comm().size();
  const int r = comm().rank();
  const int64_t n = 4 * 1024 * 1024;
  at::Tensor t = contribution(r, n, at::kFloat);
  WorkPtr work = comm().all_reduce(t);
  at::Tensor x = at::rand({256, 256});
  auto deadline = Clock::now() + std::chrono::seconds(60);
  int matmuls = 0;
  while (!work->is_completed() && Clock::now() < deadline) {
    x = at::tanh(at::mm(x, x));  // the caller's own computation
    ++matmuls;
  }
  EXPECT_TRUE(work->is_completed()) << "all_reduce made no progress without wait()";
  work->wait();
  expect_equal(t, pattern(n, at::kFloat) * (w * (w + 1) / 2), "overlapped all_reduce");
  RecordProperty("matmuls_during_allreduce", matmuls);
}

TEST(Barrier, HoldsEarlyRanksUntilTheLastArrives) {
  const int r = comm().rank();
  comm().barrier()->wait();
  auto start = Clock::now();
  if (r == 0) std::this_thread::sleep_for(milliseconds(300));
  comm().barrier()->wait();
  auto elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  if (comm().size() > 1) {
    EXPECT_GE(elapsed.count(), 250) << "barrier returned before rank 0 came";
  }
}

TEST(Split, EvenRanksReduceAmongThemselves) {
  const int w = comm().size();
  const int r = comm().rank();
  std::vector<int> evens;
  for (int q = 0; q < w; q += 2) evens.push_back(q);
  std::shared_ptr<Communicator> sub = comm().split(evens);
  if (r % 2 != 0) {
    EXPECT_EQ(sub, nullptr);
  } else {
    ASSERT_NE(sub, nullptr);
    EXPECT_EQ(sub->size(), static_cast<int>(evens.size()));
    EXPECT_EQ(sub->rank(), r / 2);
    at::Tensor t = at::full({3}, r, at::kLong);
    sub->all_reduce(t)->wait();
    int64_t expected = 0;
    for (int q : evens) expected += q;
    expect_equal(t, at::full({3}, expected, at::kLong), "sub-group all_reduce");
  }
  comm().barrier()->wait();
}

// A partition into two interleaved groups (odd and even ranks), each reducing, gathering and
// exchanging among itself; then the node and hybrid layouts built from it.
TEST(Split, PartitionGivesEveryRankItsGroup) {
  const int w = comm().size();
  const int r = comm().rank();
  std::vector<std::vector<int>> groups(w > 1 ? 2 : 1);
  for (int q = 0; q < w; ++q) groups[q % groups.size()].push_back(q);
  std::shared_ptr<Communicator> sub = split_partition(comm(), groups);
  const auto& mine = groups[r % groups.size()];
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), static_cast<int>(mine.size()));
  EXPECT_EQ(sub->rank(), r / static_cast<int>(groups.size()));
  at::Tensor t = at::full({5}, r + 1, at::kFloat);
  sub->all_reduce(t)->wait();
  float expected = 0;
  for (int q : mine) expected += q + 1;
  expect_equal(t, at::full({5}, expected, at::kFloat), "partition all_reduce");
  at::Tensor in = at::full({2 * sub->size()}, r, at::kInt), out = at::empty_like(in);
  sub->all_to_all(in, out)->wait();
  for (int i = 0; i < sub->size(); ++i) {
    EXPECT_EQ(out[2 * i].item<int>(), mine[i]) << "all_to_all in the sub-group";
  }
  comm().barrier()->wait();
}

// Pretends the job runs 2 ranks per node (the launcher's view, through GROUP_RANK) and checks the
// node groups: intra-node {2k, 2k+1}, inter-node {local rank i of every node}.
TEST(Split, NodeGroupsFollowTheLaunchLayout) {
  const int w = comm().size();
  const int r = comm().rank();
  if (w % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  Env env = Env::from_map({{"RANK", std::to_string(r)},
                           {"WORLD_SIZE", std::to_string(w)},
                           {"LOCAL_RANK", std::to_string(r % 2)},
                           {"LOCAL_WORLD_SIZE", "2"},
                           {"GROUP_RANK", std::to_string(r / 2)}});
  NodeLayout layout = discover_node_layout(comm(), env);
  ASSERT_EQ(layout.nodes(), w / 2);
  EXPECT_TRUE(layout.uniform());
  for (int q = 0; q < w; ++q) EXPECT_EQ(layout.node_of_rank[q], q / 2);
  NodeGroups g = make_node_groups(comm(), layout);
  EXPECT_EQ(g.intra->size(), 2);
  EXPECT_EQ(g.intra->rank(), r % 2);
  EXPECT_EQ(g.inter->size(), w / 2);
  EXPECT_EQ(g.inter->rank(), r / 2);
  at::Tensor t = at::full({1}, r, at::kLong);
  g.inter->all_reduce(t)->wait();
  int64_t across = 0;
  for (int q = r % 2; q < w; q += 2) across += q;
  EXPECT_EQ(t.item<int64_t>(), across);
  // Without a node rank, ranks are taken as numbered node by node: the same layout.
  Env no_group = Env::from_map({{"RANK", std::to_string(r)},
                                {"WORLD_SIZE", std::to_string(w)},
                                {"LOCAL_RANK", std::to_string(r % 2)},
                                {"LOCAL_WORLD_SIZE", "2"}});
  EXPECT_EQ(discover_node_layout(comm(), no_group).node_of_rank, layout.node_of_rank);
  comm().barrier()->wait();
}

TEST(Split, HybridGroupsShardConsecutiveRanks) {
  const int w = comm().size();
  const int r = comm().rank();
  for (int shard = 1; shard <= w; ++shard) {
    if (w % shard != 0) continue;
    HybridGroups g = make_hybrid_groups(g_comm, shard, "mics_shard_size");
    EXPECT_EQ(g.shard->size(), shard);
    EXPECT_EQ(g.shard->rank(), r % shard);
    if (shard == w) {
      EXPECT_EQ(g.replica, nullptr);
      continue;
    }
    ASSERT_NE(g.replica, nullptr);
    EXPECT_EQ(g.replica->size(), w / shard);
    EXPECT_EQ(g.replica->rank(), r / shard);
    at::Tensor t = at::full({1}, r, at::kLong);
    g.shard->all_reduce(t)->wait();
    const int64_t first = r / shard * shard;
    EXPECT_EQ(t.item<int64_t>(), shard * first + shard * (shard - 1) / 2);
  }
  if (w == 4) {
    try {
      make_hybrid_groups(g_comm, 3, "mics_shard_size");
      ADD_FAILURE() << "3 groups of 4 ranks accepted";
    } catch (const zt::Error& e) {
      EXPECT_NE(std::string(e.what()).find("mics_shard_size = 3 must divide the number of ranks"),
                std::string::npos)
          << e.what();
    }
  }
  comm().barrier()->wait();
}

TEST(Errors, BadShapesAndDtypesNameTheCulprit) {
  const int w = comm().size();
  at::Tensor in = at::zeros({4 * w + 1});
  at::Tensor out = at::zeros({4});
  try {
    comm().reduce_scatter(in, out);
    FAIL() << "expected an error";
  } catch (const zt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("reduce_scatter"), std::string::npos) << e.what();
  }
  at::Tensor strided = at::zeros({4, 4}).t();
  EXPECT_THROW(comm().all_reduce(strided), zt::Error);
  at::Tensor ints = at::zeros({4}, at::kInt);
  EXPECT_THROW(comm().all_reduce(ints, ReduceOp::kAvg), zt::Error);
  EXPECT_THROW(comm().broadcast(ints, w), zt::Error);
}

// The last rank does not join for twice the timeout: every other rank must get the timeout
// error, naming the collective and the missing rank, within the timeout (plus scheduling slack),
// not when the late rank finally comes. Then the late rank joins and everyone drains.
TEST(Timeout, RankThatNeverJoinsTimesOutTheOthers) {
  const int w = comm().size();
  const int r = comm().rank();
  if (w == 1) GTEST_SKIP() << "needs a second rank";
  comm().barrier()->wait();
  const milliseconds timeout(2000);
  at::Tensor t = at::ones({1000});
  if (r == w - 1) {
    std::this_thread::sleep_for(2 * timeout + milliseconds(500));
    comm().all_reduce(t)->wait();
  } else {
    WorkPtr work = comm().all_reduce(t);
    auto start = Clock::now();
    try {
      work->wait(timeout);
      FAIL() << "wait returned although rank " << w - 1 << " never joined";
    } catch (const zt::Error& e) {
      auto elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
      EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << e.what();
      EXPECT_GE(elapsed.count(), timeout.count() - 50);
      EXPECT_LT(elapsed.count(), timeout.count() + 1500) << "timeout error came late";
      std::string msg = e.what();
      if (r == 0) std::printf("the timeout error reads: %s\n", msg.c_str());
      EXPECT_NE(msg.find("all_reduce #"), std::string::npos) << msg;
      EXPECT_NE(msg.find("on rank " + std::to_string(r)), std::string::npos) << msg;
      EXPECT_NE(msg.find("rank " + std::to_string(w - 1) + ": no report"), std::string::npos)
          << msg;
      EXPECT_NE(msg.find("rank 0: waiting at all_reduce #"), std::string::npos) << msg;
    }
    work->wait(milliseconds(60000));  // the late rank arrives; the collective completes
  }
  EXPECT_TRUE(at::equal(t, at::full({1000}, static_cast<float>(w))));
  comm().barrier()->wait();
}

// Under mpirun with a power-of-two world, the runtime asks OpenMPI for recursive halving in
// MPI_Reduce_scatter_block (parallel/mpi_runtime.cpp); other worlds keep OpenMPI's fixed rules.
// The reductions above check that the results are the same either way.
TEST(MpiTuning, PowerOfTwoWorldsReduceScatterByRecursiveHalving) {
  const char* world = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (g_backend != "mpi" || world == nullptr) GTEST_SKIP() << "not an mpirun MPI job";
  const long n = std::strtol(world, nullptr, 10);
  const char* algorithm = std::getenv("OMPI_MCA_coll_tuned_reduce_scatter_block_algorithm");
  const char* dynamic = std::getenv("OMPI_MCA_coll_tuned_use_dynamic_rules");
  if (n >= 2 && (n & (n - 1)) == 0) {
    ASSERT_NE(algorithm, nullptr);
    ASSERT_NE(dynamic, nullptr);
    EXPECT_STREQ(algorithm, "3");
    EXPECT_STREQ(dynamic, "1");
  } else {
    EXPECT_EQ(algorithm, nullptr);
  }
}

}  // namespace
}  // namespace zt::dist

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--backend=", 10) == 0) zt::dist::g_backend = argv[i] + 10;
    if (std::strncmp(argv[i], "--mpi-mode=", 11) == 0) zt::dist::g_mpi_mode = argv[i] + 11;
  }
  return zt::run_main("zt_parallel_collectives_test", [&] {
    zt::dist::CommOptions options;
    options.backend = zt::dist::parse_backend(zt::dist::g_backend);
    options.mpi_mode = zt::dist::g_mpi_mode;
    options.timeout = std::chrono::seconds(120);
    zt::dist::g_comm = zt::dist::create_communicator(options);
    int rc = RUN_ALL_TESTS();
    zt::dist::g_comm->barrier()->wait();
    zt::dist::g_comm.reset();
    return rc;
  });
}
