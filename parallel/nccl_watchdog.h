#pragma once
// The NCCL backend's watchdog, as CPU code: the CUDA and NCCL calls it makes sit behind two small
// interfaces (WatchedWork, WatchdogBackend), which nccl_communicator_cuda.cpp implements with
// CUDA events and ncclComm_t, and which tests implement with fakes to drive every failure path
// without a GPU (tests/unit/parallel/nccl_watchdog_test.cpp).
//
// Why a watchdog: an NCCL Work::wait() orders streams and returns at once, so a collective that
// never completes (a rank died, a desync) cannot be seen by the host thread; it would hang at the
// next device synchronisation. One thread per communicator therefore polls, every `poll`:
//   1. the completion of the works in flight, oldest first (they finish in the order of the one
//      NCCL stream), dropping each completed one at once;
//   2. the communicator's asynchronous error (ncclCommGetAsyncError): a failed peer connection or
//      a CUDA error inside NCCL surfaces here within one poll, not at the timeout;
//   3. the age of the oldest work still running: past `timeout` it is a desync timeout.
// A completion query that throws (a CUDA error, e.g. a sticky launch failure) is a failure too,
// caught here instead of ending the process through std::terminate.
//
// On a failure the watchdog, in this order: records it in the shared CommFailure (the first
// failure wins; every later call and wait on the communicator and its works raises it), calls
// backend.abort() (ncclCommAbort, which unblocks kernels stuck in the collective), drops its
// works and ends. Like c10d's, a failed NCCL communicator is not usable again.
//
// Threads: track() is called by the communicator's user thread; poll_once() runs on the watchdog
// thread (or on a test's thread, never both). The watchdog never calls the backend while holding
// its own lock, so the backend may take its own lock (the communicator's NCCL mutex) inside.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/error.h"
#include "parallel/collective_info.h"

namespace zt::dist {

// The failure state a communicator and its works share.
class CommFailure {
 public:
  // Records the failure unless one is recorded already; true when this one was recorded.
  bool set(ErrorKind kind, std::string message);
  bool failed() const;
  // Throws the recorded failure as zt::Error of its kind; returns when there is none.
  void rethrow() const;

 private:
  mutable std::mutex mutex_;
  bool failed_ = false;
  ErrorKind kind_ = ErrorKind::kComm;
  std::string message_;
};

// One collective in flight.
class WatchedWork {
 public:
  virtual ~WatchedWork() = default;
  // True once the collective finished on the device. May throw (a CUDA error).
  virtual bool query() = 0;
  virtual const CollectiveInfo& info() const = 0;
  virtual std::chrono::steady_clock::time_point enqueued() const = 0;
};

// What the watchdog asks of its communicator. Called on the watchdog thread; none may throw
// except on_thread_start and async_error (a throw there counts as a failure).
class WatchdogBackend {
 public:
  virtual ~WatchdogBackend() = default;
  // First call on the watchdog thread (the NCCL backend makes its CUDA device current there, so
  // that the thread's CUDA calls do not create a context on device 0).
  virtual void on_thread_start() {}
  // "" when healthy (or when it cannot look now), else the text of an asynchronous error.
  virtual std::string async_error() = 0;
  // The one-line error of `info` timing out after `age`, with the desync report.
  virtual std::string timeout_message(const CollectiveInfo& info,
                                      std::chrono::milliseconds age) noexcept = 0;
  // Aborts the communicator. Called after the failure is recorded; may be called when the
  // communicator aborted itself already, so it must be idempotent.
  virtual void abort() noexcept = 0;
};

struct WatchdogOptions {
  std::chrono::milliseconds timeout{0};  // a collective older than this fails the communicator
  std::chrono::milliseconds poll{100};   // how often the thread looks
  std::string who = "nccl";              // names the communicator in messages: "nccl rank 1 of 4"
};

class CommWatchdog {
 public:
  CommWatchdog(WatchdogBackend& backend, std::shared_ptr<CommFailure> failure,
               WatchdogOptions options);
  ~CommWatchdog();  // stop()
  CommWatchdog(const CommWatchdog&) = delete;
  CommWatchdog& operator=(const CommWatchdog&) = delete;

  // Starts the thread (tests may call poll_once() themselves instead).
  void start();
  // Stops and joins the thread; idempotent, never throws.
  void stop() noexcept;
  // Watches `work` from now on (the communicator calls it right after enqueueing).
  void track(std::shared_ptr<WatchedWork> work);
  // One pass of the thread's loop (see the file comment). Returns false once the communicator
  // failed (by this pass or earlier), after which the thread ends. Never throws.
  bool poll_once() noexcept;
  // Works tracked and not yet seen complete.
  size_t in_flight() const;

 private:
  void run() noexcept;
  void fail(ErrorKind kind, const std::string& message) noexcept;

  WatchdogBackend& backend_;
  std::shared_ptr<CommFailure> failure_;
  WatchdogOptions options_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<WatchedWork>> works_;  // oldest first
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace zt::dist
