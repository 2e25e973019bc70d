#pragma once
// AsyncWork: a Work completed by another thread (the MPI progress thread); the caller's wait()
// blocks on a condition variable with the timeout, publishing desync state at half the timeout
// and raising the desync timeout error at the timeout (desync.h).
//
// After a timeout the collective is still in flight (MPI cannot cancel collectives): wait() may
// be called again and returns once the late ranks arrive; the tensors stay owned by the
// collective until then.

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "parallel/collective_info.h"
#include "parallel/communicator.h"
#include "parallel/desync.h"

namespace zt::dist {

class AsyncWork : public Work {
 public:
  AsyncWork(CollectiveInfo info, std::shared_ptr<DesyncReporter> desync,
            std::chrono::milliseconds default_timeout);

  void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) override;
  bool is_completed() override;

  // Called once by the completing thread.
  void complete();
  void fail(std::string message);

  const CollectiveInfo& info() const { return info_; }

 private:
  CollectiveInfo info_;
  std::shared_ptr<DesyncReporter> desync_;
  std::chrono::milliseconds default_timeout_;

  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string error_;  // non-empty when the backend failed
  bool published_ = false;
};

// The effective timeout of one wait: `requested` if > 0, else the communicator's default.
inline std::chrono::milliseconds effective_timeout(std::chrono::milliseconds requested,
                                                   std::chrono::milliseconds fallback) {
  return requested.count() > 0 ? requested : fallback;
}

}  // namespace zt::dist
