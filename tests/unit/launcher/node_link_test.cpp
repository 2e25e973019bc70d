// NodeLink: the ztruns of several nodes telling each other about failures, over loopback.
#include "launcher/node_link.h"

#include <chrono>
#include <memory>
#include <poll.h>
#include <thread>

#include <gtest/gtest.h>

#include "base/error.h"
#include "launcher/port.h"

namespace zt::launcher {
namespace {

bool stopped_within(const NodeLink& link, int timeout_ms) {
  pollfd p{link.stop_fd(), POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1;
}

TEST(NodeLink, FailureOnOneNodeStopsEveryOtherNode) {
  const int port = find_free_port();
  NodeLink n0(0, 3, "127.0.0.1", port);
  NodeLink n1(1, 3, "127.0.0.1", port);
  NodeLink n2(2, 3, "127.0.0.1", port);
  n2.report_failure("rank 5 exited with code 3 on node 2");
  ASSERT_TRUE(stopped_within(n0, 5000));
  ASSERT_TRUE(stopped_within(n1, 5000));  // relayed by node 0
  EXPECT_EQ(n0.peer_failure(), "rank 5 exited with code 3 on node 2");
  EXPECT_EQ(n1.peer_failure(), "rank 5 exited with code 3 on node 2");
  EXPECT_FALSE(stopped_within(n2, 200));  // a node does not stop itself through the link
  // A new attempt starts clean.
  n0.begin_attempt(1);
  EXPECT_FALSE(stopped_within(n0, 0));
  EXPECT_EQ(n0.peer_failure(), "");
}

TEST(NodeLink, NodeZeroFailureReachesTheOthers) {
  const int port = find_free_port();
  NodeLink n0(0, 2, "127.0.0.1", port);
  NodeLink n1(1, 2, "127.0.0.1", port);
  n0.report_failure("rank 0 was killed by signal 9 (SIGKILL) on node 0");
  ASSERT_TRUE(stopped_within(n1, 5000));
  EXPECT_EQ(n1.peer_failure(), "rank 0 was killed by signal 9 (SIGKILL) on node 0");
}

TEST(NodeLink, NodeThatConnectsLateLearnsOfTheFailure) {
  const int port = find_free_port();
  NodeLink n0(0, 2, "127.0.0.1", port);
  n0.report_failure("rank 1 exited with code 2 on node 0");
  NodeLink n1(1, 2, "127.0.0.1", port);
  ASSERT_TRUE(stopped_within(n1, 5000));
  EXPECT_EQ(n1.peer_failure(), "rank 1 exited with code 2 on node 0");
}

TEST(NodeLink, ReportsBeforeNodeZeroIsUpAreDelivered) {
  const int port = find_free_port();
  NodeLink n1(1, 2, "127.0.0.1", port);
  n1.report_failure("early failure");
  NodeLink n0(0, 2, "127.0.0.1", port);
  ASSERT_TRUE(stopped_within(n0, 5000));
  EXPECT_EQ(n0.peer_failure(), "early failure");
}

TEST(NodeLink, LateReportOfAnOlderAttemptIsIgnored) {
  const int port = find_free_port();
  NodeLink n0(0, 2, "127.0.0.1", port);
  NodeLink n1(1, 2, "127.0.0.1", port);
  n0.begin_attempt(2);
  n1.begin_attempt(1);
  n1.report_failure("stale");
  EXPECT_FALSE(stopped_within(n0, 500));
  n1.begin_attempt(2);
  n1.report_failure("current");
  ASSERT_TRUE(stopped_within(n0, 5000));
  EXPECT_EQ(n0.peer_failure(), "current");
}

TEST(NodeLink, VanishedNodeCountsAsFailedButAFinishedOneDoesNot) {
  const int port = find_free_port();
  NodeLink n0(0, 3, "127.0.0.1", port);
  auto n1 = std::make_unique<NodeLink>(1, 3, "127.0.0.1", port);
  auto n2 = std::make_unique<NodeLink>(2, 3, "127.0.0.1", port);
  // Let both connect: a failure report round-trip shows node 0 has them.
  n1->report_done();
  n2->report_failure("probe");
  ASSERT_TRUE(stopped_within(n0, 5000));
  n0.begin_attempt(1);
  n1.reset();  // said "D" first: a clean finish
  EXPECT_FALSE(stopped_within(n0, 500));
  n2.reset();  // its connection closes with no "D": like a ztrun killed with SIGKILL
  ASSERT_TRUE(stopped_within(n0, 5000));
  EXPECT_EQ(n0.peer_failure(), "node 2's ztrun went away without finishing");
}

TEST(NodeLink, ObserverLearnsTheLatestRoundAndLeavesQuietly) {
  const int port = find_free_port();
  NodeLink n0(0, 2, "127.0.0.1", port);
  NodeLink n1(1, 2, "127.0.0.1", port);
  auto observer = std::make_unique<NodeLink>(-1, 2, "127.0.0.1", port);
  n1.report_failure("round 0 failure on node 1");
  ASSERT_TRUE(stopped_within(*observer, 5000));
  ASSERT_TRUE(stopped_within(n0, 5000));
  n0.begin_attempt(1);
  n1.begin_attempt(1);
  n1.report_failure("round 1 failure on node 1");
  ASSERT_TRUE(stopped_within(n0, 5000));
  for (int i = 0; i < 100 && observer->peer_failure() != "round 1 failure on node 1"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(observer->peer_failure(), "round 1 failure on node 1");
  n0.begin_attempt(2);
  observer.reset();
  EXPECT_FALSE(stopped_within(n0, 500)) << n0.peer_failure();
}

TEST(NodeLink, PortInUseOnNodeZero) {
  const int port = find_free_port();
  NodeLink n0(0, 2, "127.0.0.1", port);
  try {
    NodeLink again(0, 2, "127.0.0.1", port);
    FAIL() << "no error";
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.message().rfind("--launcher-port " + std::to_string(port) + " cannot be used", 0),
              0u)
        << e.message();
  }
}

}  // namespace
}  // namespace zt::launcher
