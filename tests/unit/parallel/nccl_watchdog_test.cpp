// The NCCL watchdog's decisions (parallel/nccl_watchdog.h) driven through fakes, without a GPU:
// completed works released at once, an asynchronous NCCL error failing the communicator before
// the timeout, the timeout, a completion query that throws (a CUDA error) failing it instead of
// terminating the process, abort called once and after the failure is recorded, clean stops.
#include "parallel/nccl_watchdog.h"

#include <atomic>
#include <chrono>
#include <thread>

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

namespace zt::dist {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class FakeBackend : public WatchdogBackend {
 public:
  explicit FakeBackend(std::shared_ptr<CommFailure> failure) : failure_(std::move(failure)) {}

  void on_thread_start() override {
    if (fail_start) throw std::runtime_error("cudaSetDevice: invalid device ordinal");
  }
  std::string async_error() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return async_;
  }
  std::string timeout_message(const CollectiveInfo& info,
                              std::chrono::milliseconds) noexcept override {
    return "nccl " + info.describe() + " timed out; desync: rank 1: no report";
  }
  void abort() noexcept override {
    // The contract: the failure is recorded before the abort.
    failure_recorded_at_abort = failure_->failed();
    ++aborts;
  }

  void set_async(std::string text) {
    std::lock_guard<std::mutex> lock(mutex_);
    async_ = std::move(text);
  }

  std::atomic<bool> fail_start{false};
  std::atomic<int> aborts{0};
  std::atomic<bool> failure_recorded_at_abort{false};

 private:
  std::shared_ptr<CommFailure> failure_;
  std::mutex mutex_;
  std::string async_;
};

class FakeWork : public WatchedWork {
 public:
  FakeWork(uint64_t seq, Clock::time_point enqueued) : enqueued_(enqueued) {
    info_.seq = seq;
    info_.kind = "all_reduce";
    info_.detail = "sum, 4 x Float";
  }
  bool query() override {
    // As at::cuda::CUDAEvent::query does on a CUDA error: a c10::Error with a backtrace.
    TORCH_CHECK(!throws, "CUDA error: an illegal memory access was encountered\nbacktrace ...");
    return done;
  }
  const CollectiveInfo& info() const override { return info_; }
  Clock::time_point enqueued() const override { return enqueued_; }

  std::atomic<bool> done{false};
  std::atomic<bool> throws{false};

 private:
  CollectiveInfo info_;
  Clock::time_point enqueued_;
};

struct Fixture {
  explicit Fixture(std::chrono::milliseconds timeout = 1h, std::chrono::milliseconds poll = 5ms)
      : failure(std::make_shared<CommFailure>()),
        backend(failure),
        watchdog(backend, failure, WatchdogOptions{timeout, poll, "nccl rank 1 of 4"}) {}

  std::shared_ptr<FakeWork> track(uint64_t seq, Clock::time_point enqueued = Clock::now()) {
    auto w = std::make_shared<FakeWork>(seq, enqueued);
    watchdog.track(w);
    return w;
  }

  // The recorded failure as (kind, message); kind kUser when none.
  std::pair<ErrorKind, std::string> error() const {
    try {
      failure->rethrow();
    } catch (const zt::Error& e) {
      return {e.kind(), e.message()};
    }
    return {ErrorKind::kUser, ""};
  }

  std::shared_ptr<CommFailure> failure;
  FakeBackend backend;
  CommWatchdog watchdog;
};

TEST(NcclWatchdog, CompletedWorksAreReleasedAtTheNextPoll) {
  Fixture f;
  auto one = f.track(1), two = f.track(2), three = f.track(3);
  one->done = true;
  two->done = true;
  std::weak_ptr<FakeWork> first = one, second = two;
  one.reset();  // the caller dropped its works: only the watchdog holds them now
  two.reset();
  EXPECT_TRUE(f.watchdog.poll_once());
  EXPECT_EQ(f.watchdog.in_flight(), 1u);
  EXPECT_TRUE(first.expired());  // nothing of a finished collective is held after one poll
  EXPECT_TRUE(second.expired());
  EXPECT_EQ(f.backend.aborts, 0);
  EXPECT_FALSE(f.failure->failed());
}

TEST(NcclWatchdog, AsyncErrorFailsBeforeTheTimeout) {
  Fixture f(/*timeout=*/1h);
  auto w = f.track(1);
  EXPECT_TRUE(f.watchdog.poll_once());
  f.backend.set_async("ncclRemoteError: a peer closed its connection");
  EXPECT_FALSE(f.watchdog.poll_once());
  auto [kind, message] = f.error();
  EXPECT_EQ(kind, ErrorKind::kComm);
  EXPECT_EQ(message,
            "nccl rank 1 of 4 failed asynchronously: ncclRemoteError: a peer closed "
            "its connection");
  EXPECT_EQ(f.backend.aborts, 1);
  EXPECT_TRUE(f.backend.failure_recorded_at_abort);
  EXPECT_EQ(f.watchdog.in_flight(), 0u);
  // Failed: later passes neither abort again nor replace the cause.
  f.backend.set_async("something else");
  EXPECT_FALSE(f.watchdog.poll_once());
  EXPECT_EQ(f.backend.aborts, 1);
  EXPECT_EQ(f.error().second, message);
}

TEST(NcclWatchdog, OldestWorkPastTheTimeoutFailsWithTheDesyncReport) {
  Fixture f(/*timeout=*/200ms);
  f.track(7, Clock::now() - 100ms);
  EXPECT_TRUE(f.watchdog.poll_once());  // 100 ms old: not yet
  f.track(8, Clock::now() - 300ms);     // older than the timeout, but behind a younger one...
  EXPECT_TRUE(f.watchdog.poll_once());  // ...and works finish in stream order: the oldest counts
  Fixture g(/*timeout=*/200ms);
  g.track(7, Clock::now() - 300ms);
  EXPECT_FALSE(g.watchdog.poll_once());
  auto [kind, message] = g.error();
  EXPECT_EQ(kind, ErrorKind::kTimeout);
  EXPECT_EQ(message, "nccl all_reduce #7 (sum, 4 x Float) timed out; desync: rank 1: no report");
  EXPECT_EQ(g.backend.aborts, 1);
  EXPECT_TRUE(g.backend.failure_recorded_at_abort);
}

TEST(NcclWatchdog, QueryThatThrowsIsAFailureNotATerminate) {
  Fixture f(/*timeout=*/1h, /*poll=*/2ms);
  auto w = f.track(3);
  w->throws = true;
  f.watchdog.start();  // on the thread: an escaping exception would call std::terminate
  const auto deadline = Clock::now() + 10s;
  while (!f.failure->failed() && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  f.watchdog.stop();
  auto [kind, message] = f.error();
  EXPECT_EQ(kind, ErrorKind::kComm);
  EXPECT_EQ(message,
            "nccl rank 1 of 4 all_reduce #3 (sum, 4 x Float): CUDA error while polling its "
            "completion: CUDA error: an illegal memory access was encountered");
  EXPECT_EQ(f.backend.aborts, 1);
}

TEST(NcclWatchdog, FailureRecordedByTheUserThreadWins) {
  Fixture f;
  f.track(1);
  EXPECT_TRUE(f.failure->set(ErrorKind::kTimeout, "ncclCommInitRankConfig did not complete"));
  f.backend.set_async("ncclSystemError");
  EXPECT_FALSE(f.watchdog.poll_once());
  EXPECT_EQ(f.error().second, "ncclCommInitRankConfig did not complete");
  EXPECT_EQ(f.backend.aborts, 0);  // the thread that recorded it aborts (settle_locked)
}

TEST(NcclWatchdog, ThreadThatCannotSetItsDeviceFailsTheCommunicator) {
  Fixture f;
  f.backend.fail_start = true;
  f.watchdog.start();
  f.watchdog.stop();  // joins: the thread ended on its own
  auto [kind, message] = f.error();
  EXPECT_EQ(kind, ErrorKind::kComm);
  EXPECT_EQ(message,
            "nccl rank 1 of 4 watchdog could not start: cudaSetDevice: invalid device ordinal");
  EXPECT_EQ(f.backend.aborts, 1);
}

TEST(NcclWatchdog, StopsPromptlyWithWorksInFlight) {
  auto start = Clock::now();
  {
    Fixture f(/*timeout=*/1h, /*poll=*/20ms);
    f.track(1);
    f.watchdog.start();
    std::this_thread::sleep_for(30ms);
  }  // ~CommWatchdog stops and joins
  EXPECT_LT(Clock::now() - start, 2s);
}

TEST(NcclWatchdog, AsyncErrorSeenByTheThreadWithinAPoll) {
  Fixture f(/*timeout=*/1h, /*poll=*/5ms);
  f.track(1);
  f.watchdog.start();
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(f.failure->failed());
  const auto set_at = Clock::now();
  f.backend.set_async("ncclUnhandledCudaError");
  while (!f.failure->failed() && Clock::now() - set_at < 10s) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(f.failure->failed());
  EXPECT_LT(Clock::now() - set_at, 5s);
  f.watchdog.stop();
  EXPECT_EQ(f.backend.aborts, 1);
}

TEST(NcclWatchdog, RejectsNonPositiveTimeouts) {
  auto failure = std::make_shared<CommFailure>();
  FakeBackend backend(failure);
  EXPECT_THROW(CommWatchdog(backend, failure, WatchdogOptions{0ms, 5ms, "nccl"}), zt::Error);
  EXPECT_THROW(CommWatchdog(backend, failure, WatchdogOptions{1s, 0ms, "nccl"}), zt::Error);
}

TEST(CommFailure, FirstFailureWinsAndRethrowsItsKind) {
  CommFailure f;
  EXPECT_NO_THROW(f.rethrow());
  EXPECT_TRUE(f.set(ErrorKind::kTimeout, "first"));
  EXPECT_FALSE(f.set(ErrorKind::kComm, "second"));
  try {
    f.rethrow();
    FAIL() << "no throw";
  } catch (const zt::Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
    EXPECT_EQ(e.message(), "first");
  }
}

}  // namespace
}  // namespace zt::dist
