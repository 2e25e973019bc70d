#pragma once
// AioHandle: asynchronous reads and writes between host buffers and AioFiles, through io_uring
// (liburing), as DeepSpeed's aio_handle does through libaio (csrc/aio/py_lib/
// deepspeed_py_aio_handle.cpp). The timeline of one transfer:
//
//   caller    start_write(file, buf, n, off) → ticket ........ wait(ticket) ─ rethrows an error
//   thread 0  [part 0: block, block, ... queue_depth in flight on its ring]
//   thread 1  [part 1: ...]                          (thread_count contiguous parts)
//
// start_* returns at once; the buffer must stay untouched (and alive) until wait(ticket)
// returned. Transfers of one handle run in the order they were started on each thread, so a
// read started after a write of the same range sees the written bytes.
//
// Errors: a failed or short request stops nothing else in flight; wait() throws zt::Error naming
// the operation, the file, the byte offset of the failed request and the system's reason, e.g.
// "aio: write of /nvme/zt_rank0_b3.swp at offset 1048576 (1048576 bytes) failed: No space left
// on device". Where io_uring is not available (a kernel or sandbox that forbids it), the same
// requests run as pread/pwrite on the threads, with one log line saying so.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/aio/aio_file.h"
#include "core/aio/aio_options.h"

namespace zt::aio {

class AioHandle {
 public:
  struct Transfer;  // one started read or write (internal)
  using Ticket = std::shared_ptr<Transfer>;

  explicit AioHandle(const AioOptions& options = {});
  ~AioHandle();  // waits for every transfer still in flight
  AioHandle(const AioHandle&) = delete;
  AioHandle& operator=(const AioHandle&) = delete;

  // n bytes of buf to file at byte offset off (start_write), or from it (start_read).
  Ticket start_write(AioFile& file, const void* buf, int64_t n, int64_t off);
  Ticket start_read(AioFile& file, void* buf, int64_t n, int64_t off);
  // Blocks until the transfer ended; throws its first error (see the file comment). A ticket may
  // be waited more than once; an empty ticket returns at once.
  static void wait(const Ticket& ticket);
  // Synchronous forms: start and wait.
  void write(AioFile& file, const void* buf, int64_t n, int64_t off);
  void read(AioFile& file, void* buf, int64_t n, int64_t off);

  const AioOptions& options() const { return options_; }
  bool uses_io_uring() const;

 private:
  struct Part;
  class Worker;
  Ticket start(bool write, AioFile& file, void* buf, int64_t n, int64_t off);

  AioOptions options_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace zt::aio
