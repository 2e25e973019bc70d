#include "parallel/nccl_watchdog.h"

#include <c10/util/Exception.h>

namespace zt::dist {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// The first line of an exception's text: c10::Error's what() carries a C++ backtrace, and our
// errors are one line.
std::string one_line(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10_error ? c10_error->what_without_backtrace() : e.what();
  const size_t newline = text.find('\n');
  if (newline != std::string::npos) text.resize(newline);
  return text;
}

}  // namespace

bool CommFailure::set(ErrorKind kind, std::string message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failed_) return false;
  failed_ = true;
  kind_ = kind;
  message_ = std::move(message);
  return true;
}

bool CommFailure::failed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failed_;
}

void CommFailure::rethrow() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failed_) ZT_THROW_KIND(kind_, message_);
}

CommWatchdog::CommWatchdog(WatchdogBackend& backend, std::shared_ptr<CommFailure> failure,
                           WatchdogOptions options)
    : backend_(backend), failure_(std::move(failure)), options_(std::move(options)) {
  ZT_CHECK(options_.timeout.count() > 0, options_.who, " watchdog timeout must be > 0 ms, got ",
           options_.timeout.count());
  ZT_CHECK(options_.poll.count() > 0, options_.who, " watchdog poll interval must be > 0 ms, got ",
           options_.poll.count());
}

CommWatchdog::~CommWatchdog() {
  stop();
}

void CommWatchdog::start() {
  ZT_INTERNAL_ASSERT(!thread_.joinable(), "watchdog started twice");
  thread_ = std::thread([this] { run(); });
}

void CommWatchdog::stop() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void CommWatchdog::track(std::shared_ptr<WatchedWork> work) {
  std::lock_guard<std::mutex> lock(mutex_);
  works_.push_back(std::move(work));
}

size_t CommWatchdog::in_flight() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return works_.size();
}

void CommWatchdog::run() noexcept {
  try {
    backend_.on_thread_start();
  } catch (const std::exception& e) {
    fail(ErrorKind::kComm, options_.who + " watchdog could not start: " + one_line(e));
    return;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    cv_.wait_for(lock, options_.poll, [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    const bool healthy = poll_once();
    lock.lock();
    if (!healthy) break;
  }
}

bool CommWatchdog::poll_once() noexcept {
  if (failure_->failed()) return false;  // e.g. the user thread's own NCCL timeout
  try {
    // 1. Completed works, oldest first; each is released at once (it owns CUDA events).
    std::shared_ptr<WatchedWork> oldest;
    std::string query_error;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (!works_.empty()) {
        bool done = false;
        try {
          done = works_.front()->query();
        } catch (const std::exception& e) {
          query_error = detail::str(options_.who, " ", works_.front()->info().describe(),
                                    ": CUDA error while polling its completion: ", one_line(e));
          break;
        }
        if (!done) break;
        works_.pop_front();
      }
      if (!works_.empty()) oldest = works_.front();
    }
    if (!query_error.empty()) {
      fail(ErrorKind::kComm, query_error);
      return false;
    }
    // 2. An asynchronous NCCL error, without waiting for the timeout.
    std::string async;
    try {
      async = backend_.async_error();
    } catch (const std::exception& e) {
      async = "cannot read the asynchronous error: " + one_line(e);
    }
    if (!async.empty()) {
      fail(ErrorKind::kComm, options_.who + " failed asynchronously: " + async);
      return false;
    }
    // 3. The oldest collective still running, against the timeout.
    if (oldest) {
      const auto age = std::chrono::duration_cast<milliseconds>(Clock::now() - oldest->enqueued());
      if (age >= options_.timeout) {
        fail(ErrorKind::kTimeout, backend_.timeout_message(oldest->info(), age));
        return false;
      }
    }
    return true;
  } catch (const std::exception& e) {  // e.g. bad_alloc building a message
    fail(ErrorKind::kInternal, options_.who + " watchdog failed: " + one_line(e));
    return false;
  }
}

void CommWatchdog::fail(ErrorKind kind, const std::string& message) noexcept {
  try {
    failure_->set(kind, message);
  } catch (...) {  // std::string copy; the abort below matters more than the text
  }
  backend_.abort();
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    works_.clear();
  } catch (...) {  // std::mutex::lock only throws on a system error; nothing left to do then
  }
}

}  // namespace zt::dist
