#include "core/aio/aio_handle.h"

#if ZT_HAVE_LIBURING
#include <liburing.h>
#endif
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <unistd.h>

#include "base/error.h"
#include "base/logging.h"

namespace zt::aio {

struct AioHandle::Transfer {
  std::mutex mu;
  std::condition_variable cv;
  int pending = 0;
  std::string error;  // the first failure of any part

  void finish_part(const std::string& err) {
    std::lock_guard<std::mutex> lock(mu);
    if (error.empty()) error = err;
    if (--pending == 0) cv.notify_all();
  }
};

// A contiguous piece of one transfer, run by one worker.
struct AioHandle::Part {
  bool write = false;
  AioFile* file = nullptr;
  char* buf = nullptr;
  int64_t n = 0;
  int64_t off = 0;
  Ticket transfer;
};

namespace {

// One request: at most block_size bytes through one descriptor.
struct Request {
  int fd = -1;
  char* buf = nullptr;
  int64_t n = 0;
  int64_t off = 0;
};

std::string failure(bool write, const std::string& path, const Request& r, const std::string& why) {
  return detail::str("aio: ", write ? "write" : "read", " of ", path, " at offset ", r.off, " (",
                     r.n, " bytes) failed: ", why);
}

bool aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(kAlignment) == 0;
}

}  // namespace

class AioHandle::Worker {
 public:
  explicit Worker(const AioOptions& o) : o_(o) {
#if ZT_HAVE_LIBURING
    const int r = o_.use_io_uring
                      ? io_uring_queue_init(static_cast<unsigned>(o_.queue_depth), &ring_, 0)
                      : -ENOSYS;
#else
    const int r = -ENOSYS;  // built without liburing
#endif
    ring_ok_ = r == 0;
    if (!o_.use_io_uring) {
      static std::atomic<bool> said{false};
      if (!said.exchange(true)) {
        ZT_LOG_INFO("aio.use_io_uring false: NVMe offload I/O runs as pread/pwrite on ",
                    o_.thread_count, " thread(s)");
      }
    } else if (!ring_ok_) {
      static std::atomic<bool> said{false};
      if (!said.exchange(true)) {
        ZT_LOG_WARN("aio: io_uring is not available here (", std::strerror(-r),
                    "); NVMe offload I/O runs as pread/pwrite on ", o_.thread_count, " thread(s)");
      }
    }
    thread_ = std::thread([this] { run(); });
  }
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
#if ZT_HAVE_LIBURING
    if (ring_ok_) io_uring_queue_exit(&ring_);
#endif
  }
  void push(Part p) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(p));
    }
    cv_.notify_one();
  }
  bool ring_ok() const {
    return ring_ok_;
  }

 private:
  void run() {
    for (;;) {
      Part p;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stop_ and drained
        p = std::move(queue_.front());
        queue_.pop_front();
      }
      std::string err;
      try {
        err = execute(p);
      } catch (const std::exception& e) {
        err = e.what();
      }
      p.transfer->finish_part(err);
    }
  }

  // The aligned body through O_DIRECT, the rest buffered; requests of block_size bytes.
  std::string execute(const Part& p) {
    const int64_t bs = align_up(std::max<int64_t>(o_.block_size, 1));
    const bool direct = p.file->direct() && aligned(p.buf) && p.off % kAlignment == 0;
    const int64_t body = direct ? p.n / kAlignment * kAlignment : 0;
    std::deque<Request> todo;
    for (int64_t o = 0; o < body; o += bs) {
      todo.push_back({p.file->direct_fd(), p.buf + o, std::min(bs, body - o), p.off + o});
    }
    for (int64_t o = body; o < p.n; o += bs) {
      todo.push_back({p.file->buffered_fd(), p.buf + o, std::min(bs, p.n - o), p.off + o});
    }
    return ring_ok_ ? run_ring(p, todo) : run_sync(p, todo);
  }

  // A request that moved fewer bytes than asked continues buffered from where it stopped (a
  // direct read can end short at the end of the file).
  bool resubmit_rest(const Part& p, const Request& q, int64_t done, std::deque<Request>& todo,
                     std::string& err) {
    if (done == 0) {
      if (err.empty()) {
        err = failure(p.write, p.file->path(), q,
                      p.write ? "no bytes written" : "the file ends before these bytes");
      }
      return false;
    }
    todo.push_front({p.file->buffered_fd(), q.buf + done, q.n - done, q.off + done});
    return true;
  }

  std::string run_sync(const Part& p, std::deque<Request>& todo) {
    std::string err;
    while (!todo.empty() && err.empty()) {
      Request q = todo.front();
      todo.pop_front();
      const ssize_t r =
          p.write ? ::pwrite(q.fd, q.buf, q.n, q.off) : ::pread(q.fd, q.buf, q.n, q.off);
      if (r < 0) {
        if (errno == EINTR || errno == EAGAIN) {
          todo.push_front(q);
          continue;
        }
        err = failure(p.write, p.file->path(), q, std::strerror(errno));
      } else if (r < q.n) {
        resubmit_rest(p, q, r, todo, err);
      }
    }
    return err;
  }

#if !ZT_HAVE_LIBURING
  std::string run_ring(const Part& p, std::deque<Request>& todo) {
    return run_sync(p, todo);
  }
#else
  std::string run_ring(const Part& p, std::deque<Request>& todo) {
    const int qd = static_cast<int>(o_.queue_depth);
    std::vector<Request> slots(qd);
    std::vector<int> free_slots;
    for (int i = qd - 1; i >= 0; --i) free_slots.push_back(i);
    int inflight = 0;
    std::string err;
    auto submit = [&] {
      for (;;) {
        const int r = io_uring_submit(&ring_);
        if (r >= 0) return;
        if (r != -EINTR && r != -EAGAIN && r != -EBUSY) {
          ZT_THROW("aio: io_uring_submit failed for ", p.file->path(), ": ", std::strerror(-r));
        }
      }
    };
    auto complete = [&](io_uring_cqe* cqe) {
      const int slot = static_cast<int>(reinterpret_cast<uintptr_t>(io_uring_cqe_get_data(cqe)));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      const Request q = slots[slot];
      free_slots.push_back(slot);
      --inflight;
      if (res == -EINTR || res == -EAGAIN) {
        todo.push_front(q);
      } else if (res < 0) {
        if (err.empty()) err = failure(p.write, p.file->path(), q, std::strerror(-res));
      } else if (res < q.n) {
        resubmit_rest(p, q, res, todo, err);
      }
      if (!err.empty()) todo.clear();  // drain what is in flight, start nothing new
    };
    while (!todo.empty() || inflight > 0) {
      // Lock-step (overlap_events false): a new batch only when the last one was fully reaped.
      if (o_.overlap_events || inflight == 0) {
        bool queued = false;
        while (!todo.empty() && inflight < qd) {
          io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
          if (sqe == nullptr) break;
          const int slot = free_slots.back();
          free_slots.pop_back();
          const Request q = todo.front();
          todo.pop_front();
          slots[slot] = q;
          if (p.write) {
            io_uring_prep_write(sqe, q.fd, q.buf, static_cast<unsigned>(q.n), q.off);
          } else {
            io_uring_prep_read(sqe, q.fd, q.buf, static_cast<unsigned>(q.n), q.off);
          }
          io_uring_sqe_set_data(sqe, reinterpret_cast<void*>(static_cast<uintptr_t>(slot)));
          ++inflight;
          queued = true;
          if (o_.single_submit) submit();
        }
        if (queued && !o_.single_submit) submit();
      }
      if (inflight == 0) continue;
      io_uring_cqe* cqe = nullptr;
      const int r = io_uring_wait_cqe(&ring_, &cqe);
      if (r == -EINTR || r == -EAGAIN) continue;
      if (r < 0)
        ZT_THROW("aio: io_uring_wait_cqe failed for ", p.file->path(), ": ", std::strerror(-r));
      complete(cqe);
      while (io_uring_peek_cqe(&ring_, &cqe) == 0) complete(cqe);
    }
    return err;
  }
  io_uring ring_{};
#endif

  AioOptions o_;
  bool ring_ok_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Part> queue_;
  bool stop_ = false;
  std::thread thread_;
};

AioHandle::AioHandle(const AioOptions& options) : options_(options) {
  ZT_CHECK(options_.block_size >= 1 && options_.block_size <= (int64_t{1} << 30),
           "aio.block_size must be 1..2^30 bytes, got ", options_.block_size);
  ZT_CHECK(options_.queue_depth >= 1 && options_.queue_depth <= 4096,
           "aio.queue_depth must be 1..4096, got ", options_.queue_depth);
  ZT_CHECK(options_.thread_count >= 1 && options_.thread_count <= 64,
           "aio.thread_count must be 1..64, got ", options_.thread_count);
  for (int64_t i = 0; i < options_.thread_count; ++i) {
    workers_.push_back(std::make_unique<Worker>(options_));
  }
}

AioHandle::~AioHandle() = default;  // each worker drains its queue before joining

bool AioHandle::uses_io_uring() const {
  return workers_.front()->ring_ok();
}

AioHandle::Ticket AioHandle::start(bool write, AioFile& file, void* buf, int64_t n, int64_t off) {
  ZT_CHECK(n >= 0 && off >= 0, "aio: bad transfer of ", n, " bytes at offset ", off, " of ",
           file.path());
  auto t = std::make_shared<Transfer>();
  // Parts start on alignment boundaries, so each part's body can go through O_DIRECT.
  const int64_t threads = static_cast<int64_t>(workers_.size());
  const int64_t part = std::max(kAlignment, align_up((n + threads - 1) / threads));
  const int64_t parts = n == 0 ? 0 : (n + part - 1) / part;
  t->pending = static_cast<int>(parts);
  for (int64_t i = 0; i < parts; ++i) {
    Part p;
    p.write = write;
    p.file = &file;
    p.buf = static_cast<char*>(buf) + i * part;
    p.n = std::min(part, n - i * part);
    p.off = off + i * part;
    p.transfer = t;
    workers_[static_cast<size_t>(i)]->push(std::move(p));
  }
  return t;
}

AioHandle::Ticket AioHandle::start_write(AioFile& file, const void* buf, int64_t n, int64_t off) {
  // Writes only read buf; the cast lets both directions share one path.
  return start(true, file, const_cast<void*>(buf), n, off);
}

AioHandle::Ticket AioHandle::start_read(AioFile& file, void* buf, int64_t n, int64_t off) {
  return start(false, file, buf, n, off);
}

void AioHandle::wait(const Ticket& t) {
  if (!t) return;
  std::unique_lock<std::mutex> lock(t->mu);
  t->cv.wait(lock, [&] { return t->pending == 0; });
  if (!t->error.empty()) ZT_THROW(t->error);
}

void AioHandle::write(AioFile& file, const void* buf, int64_t n, int64_t off) {
  wait(start_write(file, buf, n, off));
}

void AioHandle::read(AioFile& file, void* buf, int64_t n, int64_t off) {
  wait(start_read(file, buf, n, off));
}

}  // namespace zt::aio
