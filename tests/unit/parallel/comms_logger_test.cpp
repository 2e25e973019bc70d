// The comms logger: what it counts through the recording communicator, and DeepSpeed's numbers.

#include "parallel/comms_logger.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "parallel/recording_communicator.h"
#include "tests/unit/parallel/fake_communicator.h"

namespace zt::dist {
namespace {

TEST(CommsLogger, ProfiledOpsAreCountedPerOpAndSize) {
  auto backend = std::make_shared<fake::FakeComm>();
  CommsLoggerOptions o;
  o.enabled = true;
  o.prof_all = false;
  o.prof_ops = {"all_reduce"};
  auto comm = record_collectives(backend, FlightOptions{.capacity = 0}, o);
  at::Tensor a = torch::zeros({4});
  at::Tensor b = torch::zeros({8});
  comm->all_reduce(a);
  comm->all_reduce(a);
  comm->all_reduce(b);
  comm->barrier();  // not in prof_ops
  CommsLogger* log = comms_logger_of(*comm);
  ASSERT_NE(log, nullptr);
  auto rows = log->summary();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].record_name, "all_reduce");
  EXPECT_EQ(rows[0].msg_bytes, 16);
  EXPECT_EQ(rows[0].count, 2);
  EXPECT_EQ(rows[1].total_bytes, 32);
  EXPECT_EQ(log->per_op().at("all_reduce").total_bytes, 64);
  EXPECT_NE(log->table().find("Comm. Op            Message Size"), std::string::npos);
}

TEST(CommsLogger, DebugNamesTheCaller) {
  auto backend = std::make_shared<fake::FakeComm>();
  CommsLoggerOptions o;
  o.enabled = true;
  o.debug = true;
  auto comm = record_collectives(backend, FlightOptions{.capacity = 0}, o);
  comm->barrier();
  auto rows = comms_logger_of(*comm)->summary();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].record_name.rfind("barrier | [Caller Func: ", 0), 0u) << rows[0].record_name;
}

// The numbers of DeepSpeed's calc_bw_log and convert_size (checked against
// deepspeed/utils/comms_logging.py).
TEST(CommsLogger, BandwidthAndSizesAsDeepSpeed) {
  // 1 MB all_reduce in 2 ms among 4: algbw = 2*1e6/2 B/ms = 8 Gbps; busbw = 1e6/2*1.5 -> 6 Gbps.
  Bandwidth b = calc_bw_log("all_reduce", 1000000, 2.0, 4);
  EXPECT_DOUBLE_EQ(b.algbw_gbps, 8.0);
  EXPECT_DOUBLE_EQ(b.busbw_gbps, 6.0);
  b = calc_bw_log("all_gather", 1000000, 2.0, 4);  // size * n
  EXPECT_DOUBLE_EQ(b.algbw_gbps, 16.0);
  EXPECT_DOUBLE_EQ(b.busbw_gbps, 12.0);
  b = calc_bw_log("broadcast", 1000000, 2.0, 4);
  EXPECT_DOUBLE_EQ(b.algbw_gbps, 4.0);
  EXPECT_DOUBLE_EQ(b.busbw_gbps, 4.0);
  EXPECT_EQ(convert_size(0), "0B");
  EXPECT_EQ(convert_size(1), "1.0 B");
  EXPECT_EQ(convert_size(1536), "1.5 KB");
  EXPECT_EQ(convert_size(4 << 20), "4.0 MB");
  EXPECT_EQ(convert_size(1000), "1000.0 B");
}

}  // namespace
}  // namespace zt::dist
