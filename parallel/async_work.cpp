#include "parallel/async_work.h"

#include "base/error.h"

namespace zt::dist {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

AsyncWork::AsyncWork(CollectiveInfo info, std::shared_ptr<DesyncReporter> desync,
                     milliseconds default_timeout)
    : info_(std::move(info)), desync_(std::move(desync)), default_timeout_(default_timeout) {}

void AsyncWork::complete() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  cv_.notify_all();
}

void AsyncWork::fail(std::string message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = message.empty() ? "unknown failure" : std::move(message);
    done_ = true;
  }
  cv_.notify_all();
}

bool AsyncWork::is_completed() {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void AsyncWork::wait(milliseconds timeout) {
  milliseconds limit = effective_timeout(timeout, default_timeout_);
  // The timeout counts from this wait() call, so a collective started long before (overlap)
  // is not charged for the caller's own computation.
  auto begin = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  if (!done_ && !published_) {
    cv_.wait_until(lock, begin + limit / 2, [&] { return done_; });
    if (!done_) {
      published_ = true;
      lock.unlock();
      desync_->publish_waiting(info_);
      lock.lock();
    }
  }
  cv_.wait_until(lock, begin + limit, [&] { return done_; });
  if (!done_) {
    lock.unlock();
    desync_->throw_timeout(info_, std::chrono::duration_cast<milliseconds>(Clock::now() - begin),
                           limit);
  }
  if (published_) {
    published_ = false;
    lock.unlock();
    desync_->publish_done();
    lock.lock();
  }
  if (!error_.empty()) {
    ZT_THROW_KIND(ErrorKind::kComm, desync_->backend(), " ", info_.describe(), " failed on rank ",
                  desync_->rank(), ": ", error_);
  }
}

}  // namespace zt::dist
