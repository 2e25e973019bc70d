// The flight recorder's ring, its JSON dump, and the recording communicator over a fake backend.

#include "parallel/flight_recorder.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "base/error.h"
#include "parallel/recording_communicator.h"
#include "tests/unit/parallel/fake_communicator.h"

namespace zt::dist {
namespace {

namespace fs = std::filesystem;

FlightEntry entry(uint64_t seq, const char* op) {
  FlightEntry e;
  e.seq = seq;
  std::snprintf(e.op, sizeof(e.op), "%s", op);
  e.bytes = static_cast<int64_t>(seq) * 4;
  return e;
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(FlightRecorder, RingKeepsTheLastNInOrder) {
  FlightRecorder r(3, "unused", 0, 1);
  for (uint64_t s = 1; s <= 5; ++s) r.record(entry(s, "all_reduce"));
  auto kept = r.snapshot();
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0].seq, 3u);
  EXPECT_EQ(kept[2].seq, 5u);
  EXPECT_EQ(r.recorded(), 5u);
  EXPECT_GT(kept[2].enqueue_us, 0);
}

TEST(FlightRecorder, MarksMoveForwardAndIgnoreReusedSlots) {
  FlightRecorder r(2, "unused", 0, 1);
  const uint64_t first = r.record(entry(1, "all_gather"));
  r.mark(first, FlightState::kStarted);
  r.mark(first, FlightState::kTimedOut);
  r.mark(first, FlightState::kCompleted);  // a late completion does not hide the timeout
  EXPECT_EQ(r.snapshot()[0].state, FlightState::kTimedOut);
  EXPECT_GT(r.snapshot()[0].start_us, 0);
  EXPECT_GT(r.snapshot()[0].end_us, 0);
  r.record(entry(2, "barrier"));
  r.record(entry(3, "barrier"));  // reuses the first entry's slot
  r.mark(first, FlightState::kFailed);
  EXPECT_EQ(r.snapshot()[1].seq, 3u);
  EXPECT_EQ(r.snapshot()[1].state, FlightState::kEnqueued);
}

TEST(FlightRecorder, OffRecordsNothing) {
  FlightRecorder r(0, "unused", 0, 1);
  EXPECT_EQ(r.record(entry(1, "all_reduce")), FlightRecorder::kNoSlot);
  r.mark(FlightRecorder::kNoSlot, FlightState::kCompleted);
  EXPECT_TRUE(r.snapshot().empty());
}

TEST(FlightRecorder, DumpWritesOneJsonFilePerRank) {
  const std::string dir = testing::TempDir() + "/flight_dump_test";
  fs::remove_all(dir);
  FlightRecorder r(4, dir, 3, 4);
  r.add_group("world", "gloo", {0, 1, 2, 3});
  r.record(entry(1, "all_reduce"));
  ASSERT_TRUE(r.dump("SIGUSR1"));
  EXPECT_EQ(r.path(), dir + "/flight_r3.json");
  const std::string json = read(r.path());
  EXPECT_NE(json.find("\"reason\": \"SIGUSR1\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"ranks\": [0, 1, 2, 3]"), std::string::npos) << json;
  EXPECT_NE(json.find("\"op\": \"all_reduce\""), std::string::npos) << json;
  EXPECT_FALSE(fs::exists(r.path() + ".tmp"));
}

TEST(FlightRecorder, RecordingCommunicatorRecordsAndDumpsOnTimeout) {
  const std::string dir = testing::TempDir() + "/flight_timeout_test";
  fs::remove_all(dir);
  auto backend = std::make_shared<fake::FakeComm>();
  backend->hang_from = 3;
  auto comm = record_collectives(backend, FlightOptions{.capacity = 8, .dir = dir}, {});
  auto* rec = dynamic_cast<RecordingCommunicator*>(comm.get());
  ASSERT_NE(rec, nullptr);
  at::Tensor t = torch::zeros({5}, torch::kBFloat16);
  at::Tensor out = torch::zeros({10}, torch::kBFloat16);
  comm->all_reduce(t)->wait();
  auto polled = comm->all_gather(t, out);
  EXPECT_TRUE(polled->is_completed());
  auto hung = comm->reduce_scatter(out, t);
  EXPECT_THROW(hung->wait(), Error);
  auto entries = rec->recorder()->snapshot();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(std::string(entries[0].op), "all_reduce");
  EXPECT_EQ(std::string(entries[0].detail), "sum");
  EXPECT_EQ(entries[0].state, FlightState::kCompleted);
  EXPECT_EQ(entries[1].state, FlightState::kCompleted);
  EXPECT_EQ(entries[1].bytes, 10);  // the input shard: 5 bf16
  EXPECT_EQ(std::string(entries[1].dtype), "BFloat16");
  EXPECT_EQ(entries[2].seq, 3u);
  EXPECT_EQ(entries[2].bytes, 20);  // reduce_scatter sizes its full input
  EXPECT_EQ(entries[2].state, FlightState::kTimedOut);
  const std::string json = read(dir + "/flight_r0.json");
  EXPECT_NE(json.find("\"reason\": \"collective timeout\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"state\": \"timed-out\""), std::string::npos) << json;
}

// Under NCCL wait() returns once the compute stream is ordered after the collective, not when it
// ended: the entry stays started (a hung collective must not read as completed), and is marked
// completed when the next collective finds it done.
TEST(FlightRecorder, AStreamOrderedWaitDoesNotMarkTheCollectiveCompleted) {
  auto backend = std::make_shared<fake::FakeComm>();
  backend->stream_ordered = true;
  auto comm = record_collectives(backend, FlightOptions{.capacity = 8, .dir = ""}, {});
  auto* rec = dynamic_cast<RecordingCommunicator*>(comm.get());
  ASSERT_NE(rec, nullptr);
  at::Tensor t = torch::zeros({4});
  comm->all_reduce(t)->wait();
  EXPECT_EQ(rec->recorder()->snapshot()[0].state, FlightState::kStarted);
  comm->barrier();  // the device has not finished the all-reduce yet
  EXPECT_EQ(rec->recorder()->snapshot()[0].state, FlightState::kStarted);
  backend->device_done = true;
  comm->barrier();
  const auto entries = rec->recorder()->snapshot();
  EXPECT_EQ(entries[0].state, FlightState::kCompleted);
  EXPECT_GT(entries[0].end_us, 0);
  EXPECT_EQ(entries[1].state, FlightState::kStarted);  // never waited for
}

TEST(FlightRecorder, BothOffReturnsTheBackendItself) {
  auto backend = std::make_shared<fake::FakeComm>();
  auto comm = record_collectives(backend, FlightOptions{.capacity = 0}, {});
  EXPECT_EQ(comm.get(), backend.get());
  EXPECT_EQ(comms_logger_of(*comm), nullptr);
}

}  // namespace
}  // namespace zt::dist
