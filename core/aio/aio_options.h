#pragma once
// Options of the asynchronous file I/O of NVMe offload (core/aio/aio_handle.h), DeepSpeed's `aio`
// block (deepspeed/runtime/swap_tensor/aio_config.py and constants.py: block_size 1 MiB,
// queue_depth 8, thread_count / intra_op_parallelism 1, single_submit false, overlap_events
// true). What each one does here:
//
//   block_size      bytes per request: one transfer is cut into requests of this size
//   queue_depth     requests in flight per thread (the io_uring's submission queue size)
//   thread_count    threads that split one transfer into contiguous parts, each with its own ring
//   single_submit   true: one io_uring_submit() per request; false: one per batch of requests
//   overlap_events  true: a completed request is replaced at once (the queue stays full);
//                   false: a batch of queue_depth requests is submitted and all of it reaped
//                   before the next batch (DeepSpeed's lock-step mode)
//   use_io_uring    zerotorch's own key: false runs the same requests as pread/pwrite on the
//                   threads, the path taken anyway where io_uring is unavailable (a sandbox, a
//                   build without liburing), so a CPU machine can test it

#include <cstdint>

namespace zt::aio {

// O_DIRECT needs buffer addresses, file offsets and lengths aligned to the device's logical
// block size; 4 KiB covers every device in use (512 B and 4 KiB sectors).
inline constexpr int64_t kAlignment = 4096;

inline int64_t align_up(int64_t n, int64_t a = kAlignment) {
  return (n + a - 1) / a * a;
}

struct AioOptions {
  int64_t block_size = 1 << 20;
  int64_t queue_depth = 8;
  int64_t thread_count = 1;
  bool single_submit = false;
  bool overlap_events = true;
  bool use_io_uring = true;
};

}  // namespace zt::aio
