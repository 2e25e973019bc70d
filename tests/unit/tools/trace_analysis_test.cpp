// zt-trace's analysis on hand-written dumps: a divergence with a majority, one with a tie, a rank
// that never entered, the slowest rank, a wrapped ring, and a file that is no dump.

#include "tools/trace_analysis.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace zt::tools {
namespace {

// One collective as the recorder writes it; arrival in ms after an epoch common to the ranks.
std::string e(int seq, const char* op, int bytes, const char* state, int arrive_ms = 0) {
  const long long at = 1000000000LL + arrive_ms * 1000LL;
  return "{\"seq\": " + std::to_string(seq) + ", \"group\": 0, \"op\": \"" + op +
         "\", \"dtype\": \"Float\", \"detail\": \"\", \"numel\": " + std::to_string(bytes / 4) +
         ", \"bytes\": " + std::to_string(bytes) + ", \"state\": \"" + state +
         "\", \"enqueue_us\": " + std::to_string(at) + ", \"start_us\": " + std::to_string(at) +
         ", \"end_us\": " + std::to_string(at + 1000) + "}";
}

RankDump dump(int rank, int world, const std::vector<std::string>& entries) {
  std::string ranks, list;
  for (int r = 0; r < world; ++r) ranks += (r ? ", " : "") + std::to_string(r);
  for (size_t i = 0; i < entries.size(); ++i) list += (i ? ",\n" : "") + entries[i];
  const std::string json = "{\"version\": 1, \"rank\": " + std::to_string(rank) +
                           ", \"world_size\": " + std::to_string(world) +
                           ", \"reason\": \"collective timeout\", \"capacity\": 100, "
                           "\"recorded\": 3, \"groups\": [{\"id\": 0, \"name\": \"world\", "
                           "\"backend\": \"gloo\", \"ranks\": [" +
                           ranks + "]}], \"entries\": [" + list + "]}";
  return parse_dump(json, "rank" + std::to_string(rank));
}

TEST(TraceAnalysis, TheOddRankOutOfThreeIsNamedAtTheFirstDifference) {
  auto report = analyze({
      dump(0, 3, {e(1, "all_reduce", 4, "completed"), e(2, "all_gather", 144, "timed-out")}),
      dump(1, 3, {e(1, "all_reduce", 4, "completed"), e(2, "all_gather", 160, "timed-out")}),
      dump(2, 3, {e(1, "all_reduce", 4, "completed"), e(2, "all_gather", 144, "timed-out")}),
  });
  EXPECT_EQ(report.verdict.rfind("world collective #2 diverged: rank 1 called all_gather 160 B "
                                 "Float where ranks 0,2 called all_gather 144 B Float",
                                 0),
            0u)
      << report.verdict;
}

TEST(TraceAnalysis, ATieNamesEveryVariant) {
  auto report = analyze({
      dump(0, 2, {e(1, "all_gather", 144, "started")}),
      dump(1, 2, {e(1, "reduce_scatter", 288, "started")}),
  });
  EXPECT_NE(report.verdict.find("rank 0 called all_gather 144 B Float; rank 1 called "
                                "reduce_scatter 288 B Float"),
            std::string::npos)
      << report.verdict;
}

TEST(TraceAnalysis, ARankThatNeverEnteredIsNamed) {
  auto report = analyze({
      dump(0, 2, {e(1, "all_reduce", 4, "completed"), e(2, "all_gather", 64, "timed-out")}),
      dump(1, 2, {e(1, "all_reduce", 4, "completed")}),
  });
  EXPECT_EQ(report.verdict,
            "rank 1 never entered world collective #2 (all_gather 64 B) that rank 0 waited in "
            "(timed-out)");
}

TEST(TraceAnalysis, AgreeingRanksNameTheSlowest) {
  auto report = analyze({
      dump(0, 2, {e(1, "all_reduce", 4, "completed", 0), e(2, "barrier", 0, "completed", 10)}),
      dump(1, 2, {e(1, "all_reduce", 4, "completed", 30), e(2, "barrier", 0, "completed", 50)}),
  });
  EXPECT_EQ(report.verdict,
            "no divergence: every rank recorded the same collectives; world: rank 1 arrived last "
            "at 2 of 2 collectives (mean spread of arrivals 35.0 ms)");
  EXPECT_NE(report.table.find("#2 barrier 0 | r0: completed +0.0 ms 1.0 ms | r1: completed +40.0 "
                              "ms 1.0 ms | rank 1"),
            std::string::npos)
      << report.table;
}

TEST(TraceAnalysis, AWrappedRingIsComparedWhereEveryRankHasEntries) {
  // Rank 0's ring kept #2..#3 only; #1 on rank 1 alone is no divergence.
  auto report = analyze({
      dump(0, 2, {e(2, "all_reduce", 4, "completed"), e(3, "all_reduce", 4, "completed")}),
      dump(1, 2,
           {e(1, "barrier", 0, "completed"), e(2, "all_reduce", 4, "completed"),
            e(3, "all_reduce", 4, "completed")}),
  });
  EXPECT_EQ(report.verdict.rfind("no divergence", 0), 0u) << report.verdict;
}

TEST(TraceAnalysis, AMissingDumpIsAFinding) {
  auto report = analyze({dump(0, 2, {e(1, "all_reduce", 4, "completed")})});
  ASSERT_FALSE(report.findings.empty());
  EXPECT_EQ(report.findings[0].rfind("no dump from rank(s) 1", 0), 0u) << report.findings[0];
}

TEST(TraceAnalysis, NotADumpIsAnError) {
  EXPECT_THROW(parse_dump("{\"hello\": 1}", "x.json"), Error);
  EXPECT_THROW(parse_dump("{not json", "x.json"), Error);
}

}  // namespace
}  // namespace zt::tools
