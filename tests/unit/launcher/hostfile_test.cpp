// DeepSpeed hostfiles and --include/--exclude filters.
#include "launcher/hostfile.h"

#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "base/error.h"

namespace zt::launcher {
namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const zt::Error& e) {
    return e.message();
  }
  return "";
}

std::vector<HostSlots> three_hosts() {
  return parse_hostfile("a slots=2\nb slots=4\nc slots=1\n", "hf");
}

TEST(Hostfile, ParsesLinesCommentsAndBlanks) {
  const auto hosts =
      parse_hostfile("# cluster\n\nworker-0 slots=4   # the master\n  worker-1\tslots=2\n\n", "hf");
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].host, "worker-0");
  EXPECT_EQ(hosts[0].slots, 4);
  EXPECT_EQ(hosts[1].host, "worker-1");
  EXPECT_EQ(hosts[1].slots, 2);
}

TEST(Hostfile, MalformedLinesNameTheirLineNumber) {
  EXPECT_EQ(error_of([] { parse_hostfile("a slots=1\n\nb slots=x\n", "hf.txt"); }),
            "hf.txt:3: expected 'HOSTNAME slots=N' with N >= 1, got 'b slots=x'");
  EXPECT_EQ(error_of([] { parse_hostfile("# c\nb\n", "hf"); }),
            "hf:2: expected 'HOSTNAME slots=N' with N >= 1, got 'b'");
  EXPECT_EQ(error_of([] { parse_hostfile("b slots=0\n", "hf"); }),
            "hf:1: expected 'HOSTNAME slots=N' with N >= 1, got 'b slots=0'");
  EXPECT_EQ(error_of([] { parse_hostfile("b slots=2 extra\n", "hf"); }),
            "hf:1: expected 'HOSTNAME slots=N' with N >= 1, got 'b slots=2 extra'");
  EXPECT_EQ(error_of([] { parse_hostfile("b gpus=2\n", "hf"); }),
            "hf:1: expected 'HOSTNAME slots=N' with N >= 1, got 'b gpus=2'");
  EXPECT_EQ(error_of([] { parse_hostfile("b slots=-1\n", "hf"); }),
            "hf:1: expected 'HOSTNAME slots=N' with N >= 1, got 'b slots=-1'");
}

TEST(Hostfile, DuplicateHostIsAnError) {
  EXPECT_EQ(error_of([] { parse_hostfile("a slots=1\nb slots=1\na slots=2\n", "hf"); }),
            "hf:3: host 'a' is listed twice");
}

TEST(Hostfile, EmptyOrMissingFile) {
  EXPECT_EQ(error_of([] { parse_hostfile("# nothing\n\n", "hf"); }),
            "hf: the hostfile lists no hosts");
  EXPECT_EQ(error_of([] { read_hostfile("/nonexistent/zt_hostfile"); }),
            "cannot read --hostfile /nonexistent/zt_hostfile");
}

TEST(Hostfile, ReadsAFile) {
  const std::string path = ::testing::TempDir() + "zt_hostfile_test.txt";
  std::ofstream(path) << "n1 slots=3\n";
  const auto hosts = read_hostfile(path);
  std::remove(path.c_str());
  ASSERT_EQ(hosts.size(), 1u);
  EXPECT_EQ(hosts[0].slots, 3);
}

TEST(HostFilter, NoFilterKeepsEverySlot) {
  const auto nodes = filter_hosts(three_hosts(), "", "");
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[1].slots, (std::vector<int>{0, 1, 2, 3}));
}

TEST(HostFilter, IncludeHostsAndSlots) {
  const auto nodes = filter_hosts(three_hosts(), "c@b:0,2", "");
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].host, "b");  // hostfile order, not filter order
  EXPECT_EQ(nodes[0].slots, (std::vector<int>{0, 2}));
  EXPECT_EQ(nodes[1].host, "c");
  EXPECT_EQ(nodes[1].slots, (std::vector<int>{0}));
}

TEST(HostFilter, ExcludeHostsAndSlots) {
  const auto nodes = filter_hosts(three_hosts(), "", "a@b:1,3");
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].host, "b");
  EXPECT_EQ(nodes[0].slots, (std::vector<int>{0, 2}));
  EXPECT_EQ(nodes[1].host, "c");
}

TEST(HostFilter, BadFilters) {
  const auto hosts = three_hosts();
  EXPECT_EQ(error_of([&] { filter_hosts(hosts, "z", ""); }),
            "--include names host 'z', which is not in the hostfile");
  EXPECT_EQ(error_of([&] { filter_hosts(hosts, "", "a:2"); }),
            "--exclude slot 2 of host 'a' is past its 2 slots");
  EXPECT_EQ(error_of([&] { filter_hosts(hosts, "a:x", ""); }),
            "--include has a bad slot 'x' for host 'a'");
  EXPECT_EQ(error_of([&] { filter_hosts(hosts, "a@a", ""); }), "--include names host 'a' twice");
  EXPECT_EQ(error_of([&] { filter_hosts(hosts, "a@@b", ""); }),
            "--include 'a@@b' has an empty host entry");
  EXPECT_EQ(error_of([&] { filter_hosts(hosts, "", "a@b@c"); }),
            "--include/--exclude leave no host to run on");
  EXPECT_EQ(error_of([&] { filter_hosts(hosts, "a", "b"); }),
            "--include and --exclude are mutually exclusive");
}

}  // namespace
}  // namespace zt::launcher
