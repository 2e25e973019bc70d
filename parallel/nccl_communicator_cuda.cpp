// NcclCommunicator: the nccl backend, compiled into the CUDA plugin (libzt_cuda.so). Contract and
// stream timeline in nccl_communicator.h.
//
// Device: the constructor makes args.device the calling thread's current CUDA device
// (c10::cuda::set_device), as torch.cuda.set_device(local_rank) does in a torchrun script: the
// engine's kernels run on the current device's current stream and its lazily allocated buffers
// land on the current device, so with several GPUs per node every rank must have made its own
// device current before the first step, not only the NCCL calls.
//
// Timeouts and errors: wait() does not block the host (it orders LibTorch's current stream after
// the collective), so a hang cannot be seen in wait(). A watchdog thread per communicator
// (nccl_watchdog.h) polls completion, ncclCommGetAsyncError and the age of every collective in
// flight; on a failure it records the error, which every later call on the communicator and
// every wait()/is_completed() on its works raise, and aborts the NCCL communicator (which
// unblocks stuck kernels). Like c10d's watchdog, a failed NCCL communicator is not usable again.
// NCCL allows one thread at a time per communicator: every NCCL call on comm_, from the user's
// thread or the watchdog's, holds nccl_mutex_, and an aborted comm_ is never touched again.
// Communicators are created non-blocking (ncclConfig_t.blocking = 0) so that a rank missing at
// initialisation is a timeout too, not a hang in ncclCommInitRank.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <nccl.h>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "base/error.h"
#include "parallel/async_work.h"
#include "parallel/collective_info.h"
#include "parallel/desync.h"
#include "parallel/nccl_communicator.h"
#include "parallel/nccl_watchdog.h"

namespace zt::dist {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kChar: return ncclInt8;
    case at::kByte: return ncclUint8;
    case at::kBool: return ncclUint8;
    default: ZT_THROW("nccl backend does not support dtype ", t);
  }
}

// A bool is one byte holding 0 or 1: summing bytes would give counts (and wrap at 256 ranks), so
// sum means "any" (max) and, for symmetry, min stays "all"; as c10d's NCCL backend maps them.
ncclRedOp_t nccl_op(ReduceOp op, at::ScalarType t) {
  if (t == at::kBool) {
    ZT_CHECK(op != ReduceOp::kAvg, "nccl backend: average of a bool tensor is undefined");
    return op == ReduceOp::kMin ? ncclMin : ncclMax;
  }
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}

// What works share with their communicator: where they live and its failure state. Works hold
// this, not the communicator, so a work outliving its communicator stays safe to wait on.
struct NcclShared {
  int rank = 0;
  int device = 0;
  milliseconds timeout{0};
  CommFailure failure;
};

// One collective: done_ is recorded on the NCCL stream after it. It holds no tensors: their
// storage was recorded on the NCCL stream (recordStream), so the caching allocator keeps it until
// the collective is done even if the caller frees it; holding the tensors as well would keep
// them counted as allocated until the watchdog's next poll.
class NcclWork : public Work, public WatchedWork {
 public:
  NcclWork(std::shared_ptr<NcclShared> owner, CollectiveInfo info, bool blocking)
      : info_(std::move(info)), owner_(std::move(owner)), blocking_(blocking) {}

  void wait(milliseconds timeout) override;
  bool is_completed() override;

  // WatchedWork, for the watchdog.
  bool query() override { return done_.query(); }
  const CollectiveInfo& info() const override { return info_; }
  Clock::time_point enqueued() const override { return enqueued_; }

  at::cuda::CUDAEvent done_{cudaEventDisableTiming};

 private:
  CollectiveInfo info_;
  Clock::time_point enqueued_ = Clock::now();
  std::shared_ptr<NcclShared> owner_;
  bool blocking_;
};

class NcclCommunicator : public Communicator, private WatchdogBackend {
 public:
  // A new NCCL communicator over args.store's ranks (ncclCommInitRankConfig).
  explicit NcclCommunicator(const NcclCreateArgs& args) : NcclCommunicator(args, nullptr) {}

  // `adopted`: a communicator split from another one (already initialised), or null to create one.
  NcclCommunicator(const NcclCreateArgs& args, ncclComm_t adopted)
      : shared_(std::make_shared<NcclShared>()),
        rank_(args.rank),
        size_(args.size),
        device_(args.device),
        store_(args.store),
        timeout_(args.timeout),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false,
                                             static_cast<c10::DeviceIndex>(args.device))),
        watchdog_(*this, std::shared_ptr<CommFailure>(shared_, &shared_->failure),
                  WatchdogOptions{args.timeout, kWatchdogPoll,
                                  detail::str("nccl rank ", args.rank, " of ", args.size)}) {
    shared_->rank = rank_;
    shared_->device = device_;
    shared_->timeout = timeout_;
    // See the file comment: this rank's device is the thread's current device from now on.
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(device_));
    desync_ = std::make_shared<DesyncReporter>(store_, rank_, size_, backend_);
    if (adopted != nullptr) {
      comm_ = adopted;
      watchdog_.start();
      return;
    }
    ncclUniqueId id;
    if (rank_ == 0) {
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
      store_->set("nccl_id", std::vector<uint8_t>(bytes, bytes + sizeof(id)));
    }
    std::vector<uint8_t> got = store_->get("nccl_id");  // waits up to the store's timeout
    ZT_INTERNAL_ASSERT(got.size() == sizeof(id), "ncclUniqueId of ", got.size(), " bytes");
    std::memcpy(&id, got.data(), sizeof(id));
    {
      std::lock_guard<std::mutex> lock(nccl_mutex_);
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      const ncclResult_t rc = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
      settle_locked(rc, "ncclCommInitRankConfig", Clock::now() + timeout_);
    }
    watchdog_.start();
  }

  // Never throws: a destructor runs during unwinding too (e.g. after a timeout).
  ~NcclCommunicator() override {
    watchdog_.stop();
    try {
      std::lock_guard<std::mutex> lock(nccl_mutex_);
      if (comm_ == nullptr || aborted_) return;
      c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
      if (shared_->failure.failed()) {
        abort_locked();
        return;
      }
      // Finalize flushes the collectives in flight; a peer that never finishes them must not hang
      // the destructor, so after 10 s the communicator is aborted instead.
      ncclResult_t state = ncclCommFinalize(comm_);
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      while (state == ncclInProgress && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclSystemError;
      }
      if (state == ncclSuccess) {
        ncclCommDestroy(comm_);
        comm_ = nullptr;
      } else {
        abort_locked();
      }
    } catch (...) {  // a CUDA guard or lock failing: nothing sensible left to do in a destructor
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& backend() const override { return backend_; }
  c10::Device device() const override {
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device_));
  }

  WorkPtr all_reduce(at::Tensor& t, ReduceOp op) override {
    check_tensor(t, "all_reduce");
    auto work = begin("all_reduce", detail::str(to_string(op), ", ", describe_tensor(t)), {t});
    if (t.numel() > 0) {
      call("ncclAllReduce", [&](ncclComm_t comm) {
        return ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.scalar_type()),
                             nccl_op(op, t.scalar_type()), comm, stream_.stream());
      });
    }
    return end(work);
  }

  WorkPtr reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override {
    check_tensor(input, "reduce_scatter");
    check_tensor(output, "reduce_scatter");
    ZT_CHECK(input.scalar_type() == output.scalar_type() && input.numel() == output.numel() * size_,
             "nccl reduce_scatter: input (", describe_tensor(input), ") must be size() * output (",
             describe_tensor(output), ")");
    auto work = begin("reduce_scatter", detail::str(to_string(op), ", ", describe_tensor(input)),
                      {input, output});
    if (output.numel() > 0) {
      call("ncclReduceScatter", [&](ncclComm_t comm) {
        return ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(),
                                 nccl_type(input.scalar_type()), nccl_op(op, input.scalar_type()),
                                 comm, stream_.stream());
      });
    }
    return end(work);
  }

  WorkPtr all_gather(const at::Tensor& input, at::Tensor& output) override {
    check_tensor(input, "all_gather");
    check_tensor(output, "all_gather");
    ZT_CHECK(input.scalar_type() == output.scalar_type() && output.numel() == input.numel() * size_,
             "nccl all_gather: output (", describe_tensor(output), ") must be size() * input (",
             describe_tensor(input), ")");
    auto work = begin("all_gather", describe_tensor(input), {input, output});
    if (input.numel() > 0) {
      call("ncclAllGather", [&](ncclComm_t comm) {
        return ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(),
                             nccl_type(input.scalar_type()), comm, stream_.stream());
      });
    }
    return end(work);
  }

  WorkPtr broadcast(at::Tensor& t, int root) override {
    check_tensor(t, "broadcast");
    ZT_CHECK(root >= 0 && root < size_, "nccl broadcast: root ", root, " is outside 0..",
             size_ - 1);
    auto work = begin("broadcast", detail::str("root ", root, ", ", describe_tensor(t)), {t});
    if (t.numel() > 0) {
      call("ncclBroadcast", [&](ncclComm_t comm) {
        return ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.scalar_type()),
                             root, comm, stream_.stream());
      });
    }
    return end(work);
  }

  // Equal chunks through one NCCL group of point-to-point calls (NCCL has no all-to-all call).
  WorkPtr all_to_all(const at::Tensor& input, at::Tensor& output) override {
    check_tensor(input, "all_to_all");
    check_tensor(output, "all_to_all");
    check_all_to_all(input, output, size_, "nccl");
    auto work = begin("all_to_all", describe_tensor(input), {input, output});
    if (input.numel() > 0) {
      const int64_t n = input.numel() / size_;
      const int64_t bytes = n * static_cast<int64_t>(input.element_size());
      const ncclDataType_t type = nccl_type(input.scalar_type());
      call("ncclGroupEnd", [&](ncclComm_t comm) {
        ncclResult_t rc = ncclGroupStart();
        for (int peer = 0; peer < size_ && (rc == ncclSuccess || rc == ncclInProgress); ++peer) {
          const char* in = static_cast<const char*>(input.data_ptr()) + peer * bytes;
          char* out = static_cast<char*>(output.data_ptr()) + peer * bytes;
          rc = ncclSend(in, n, type, peer, comm, stream_.stream());
          if (rc == ncclSuccess || rc == ncclInProgress)
            rc = ncclRecv(out, n, type, peer, comm, stream_.stream());
        }
        const ncclResult_t end_rc = ncclGroupEnd();
        return rc == ncclSuccess || rc == ncclInProgress ? end_rc : rc;
      });
    }
    return end(work);
  }

  // ncclCommSplit: collective over this communicator; ranks outside `ranks` pass
  // NCCL_SPLIT_NOCOLOR and get nullptr. The child shares this rank's device and gets its own
  // stream, watchdog and namespace of the job store (for its desync reports).
  std::shared_ptr<Communicator> split(const std::vector<int>& ranks) override {
    int index = -1;
    for (size_t i = 0; i < ranks.size(); ++i) {
      ZT_CHECK(ranks[i] >= 0 && ranks[i] < size_, "nccl split: rank ", ranks[i], " is outside 0..",
               size_ - 1);
      if (ranks[i] == rank_) index = static_cast<int>(i);
    }
    const int split_id = splits_++;
    ++seq_;
    ncclComm_t child = nullptr;
    {
      std::lock_guard<std::mutex> lock(nccl_mutex_);
      shared_->failure.rethrow();
      c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      const ncclResult_t rc =
          ncclCommSplit(comm_, index >= 0 ? 0 : NCCL_SPLIT_NOCOLOR, index, &child, &config);
      settle_locked(rc, "ncclCommSplit", Clock::now() + timeout_);
      // A non-blocking split finishes in the child: wait for it there too.
      ncclResult_t state = ncclInProgress;
      const auto deadline = Clock::now() + timeout_;
      while (child != nullptr && state == ncclInProgress) {
        if (ncclCommGetAsyncError(child, &state) != ncclSuccess) state = ncclSystemError;
        if (state == ncclInProgress) {
          if (Clock::now() > deadline) {
            ncclCommAbort(child);
            ZT_THROW_KIND(ErrorKind::kTimeout, "ncclCommSplit did not complete on rank ", rank_,
                          " of ", size_, " within ", timeout_.count(), " ms");
          }
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
      }
      if (child != nullptr && state != ncclSuccess) {
        ncclCommAbort(child);
        ZT_THROW_KIND(ErrorKind::kComm, "ncclCommSplit failed on rank ", rank_, " of ", size_, ": ",
                      ncclGetErrorString(state));
      }
    }
    if (index < 0) return nullptr;
    NcclCreateArgs args;
    args.store = c10::make_intrusive<c10d::PrefixStore>("split" + std::to_string(split_id), store_);
    args.rank = index;
    args.size = static_cast<int>(ranks.size());
    args.device = device_;
    args.timeout = timeout_;
    return std::make_shared<NcclCommunicator>(args, child);
  }

  // A one-element all-reduce whose wait() blocks the host, as a barrier must.
  WorkPtr barrier() override {
    at::Tensor flag = at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(
                                         at::kCUDA, static_cast<c10::DeviceIndex>(device_)));
    auto work = begin("barrier", "", {flag}, /*blocking=*/true);
    call("ncclAllReduce", [&](ncclComm_t comm) {
      return ncclAllReduce(flag.data_ptr(), flag.data_ptr(), 1, ncclInt32, ncclSum, comm,
                           stream_.stream());
    });
    return end(work);
  }

 private:
  // How often the watchdog looks: an async error or a finished collective is seen within this.
  static constexpr milliseconds kWatchdogPoll{100};

  std::string nccl_error(ncclResult_t rc, const char* call) {
    return detail::str(call, " failed on rank ", rank_, " of ", size_, ": ", ncclGetErrorString(rc),
                       " (", comm_ != nullptr && !aborted_ ? ncclGetLastError(comm_) : "", ")");
  }

  void check(ncclResult_t rc, const char* call) {
    if (rc != ncclSuccess && rc != ncclInProgress) {
      ZT_THROW_KIND(ErrorKind::kComm, nccl_error(rc, call));
    }
  }

  void abort_locked() noexcept {
    if (comm_ != nullptr && !aborted_) {
      ncclCommAbort(comm_);
      aborted_ = true;
    }
  }

  // Non-blocking communicators may answer ncclInProgress: poll until the call settled. A failure
  // or a timeout is recorded (so works and later calls raise it) and aborts the communicator.
  // Holds nccl_mutex_.
  void settle_locked(ncclResult_t rc, const char* call, Clock::time_point deadline) {
    ncclResult_t state = rc;
    while (state == ncclInProgress) {
      if (Clock::now() > deadline) {
        const std::string message = detail::str(
            call, " did not complete on rank ", rank_, " of ", size_, " within ", timeout_.count(),
            " ms (a rank never joined?); desync: ", desync_ ? desync_->report() : "");
        shared_->failure.set(ErrorKind::kTimeout, message);
        abort_locked();
        ZT_THROW_KIND(ErrorKind::kTimeout, message);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (comm_ == nullptr) break;  // init failed before creating the communicator
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclSystemError;
    }
    if (state != ncclSuccess) {
      const std::string message = nccl_error(state, call);
      shared_->failure.set(ErrorKind::kComm, message);
      abort_locked();
      ZT_THROW_KIND(ErrorKind::kComm, message);
    }
  }

  // One NCCL call on comm_, serialised with the watchdog's, then settled.
  template <typename F>
  void call(const char* name, F&& nccl) {
    std::lock_guard<std::mutex> lock(nccl_mutex_);
    shared_->failure.rethrow();
    ZT_INTERNAL_ASSERT(!aborted_, "nccl communicator aborted without a recorded failure");
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    settle_locked(nccl(comm_), name, Clock::now() + timeout_);
  }

  void check_tensor(const at::Tensor& t, const char* op) {
    shared_->failure.rethrow();
    ZT_CHECK(t.defined() && t.is_cuda() && t.get_device() == device_, "nccl ", op,
             ": tensor must be on cuda:", device_, ", got ",
             t.defined() ? t.device().str() : "undefined");
    ZT_CHECK(t.is_contiguous(), "nccl ", op, ": tensor must be contiguous");
  }

  // Orders the NCCL stream after LibTorch's current stream and protects the storages.
  std::shared_ptr<NcclWork> begin(const char* kind, std::string detail,
                                  const std::vector<at::Tensor>& tensors, bool blocking = false) {
    shared_->failure.rethrow();
    CollectiveInfo info;
    info.seq = ++seq_;
    info.kind = kind;
    info.detail = std::move(detail);
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    auto work = std::make_shared<NcclWork>(shared_, std::move(info), blocking);
    at::cuda::CUDAEvent ready(cudaEventDisableTiming);
    ready.record(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_)));
    ready.block(stream_);
    for (const at::Tensor& t : tensors) {
      // The caching allocator must not hand this memory out again before the NCCL stream
      // is done with it, even if the caller drops its tensor early.
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
    }
    return work;
  }

  WorkPtr end(const std::shared_ptr<NcclWork>& work) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    work->done_.record(stream_);
    watchdog_.track(work);
    return work;
  }

  // WatchdogBackend (on the watchdog thread).
  void on_thread_start() override {
    // Without this, the thread's first CUDA call (the event queries) would create a context on
    // device 0, costing every rank of a multi-GPU node memory on GPU 0.
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(device_));
  }

  std::string async_error() override {
    // The user's thread may be inside an NCCL call: look at the next poll rather than wait.
    std::unique_lock<std::mutex> lock(nccl_mutex_, std::try_to_lock);
    if (!lock.owns_lock() || comm_ == nullptr || aborted_) return "";
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
    if (rc != ncclSuccess) return nccl_error(rc, "ncclCommGetAsyncError");
    if (state == ncclSuccess || state == ncclInProgress) return "";
    return nccl_error(state, "a collective");
  }

  std::string timeout_message(const CollectiveInfo& info, milliseconds age) noexcept override {
    try {
      desync_->throw_timeout(info, age, timeout_);
    } catch (const zt::Error& e) {
      return e.message();
    } catch (...) {
    }
    return detail::str("nccl ", info.describe(), " timed out on rank ", rank_, " after ",
                       age.count(), " ms");
  }

  void abort() noexcept override {
    try {
      std::lock_guard<std::mutex> lock(nccl_mutex_);
      abort_locked();
    } catch (...) {  // std::mutex::lock throws only on a system error
    }
  }

  std::shared_ptr<NcclShared> shared_;
  int rank_;
  int size_;
  int device_;
  std::string backend_ = "nccl";
  c10::intrusive_ptr<c10d::Store> store_;
  milliseconds timeout_;
  c10::cuda::CUDAStream stream_;
  std::shared_ptr<DesyncReporter> desync_;
  uint64_t seq_ = 0;
  int splits_ = 0;

  std::mutex nccl_mutex_;  // held for every NCCL call on comm_ (NCCL: one thread at a time)
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;  // comm_ was aborted (freed by NCCL): never touch it again

  // Last member: destroyed (stopped) first, while everything it calls back into still exists.
  CommWatchdog watchdog_;
};

void NcclWork::wait(milliseconds timeout) {
  owner_->failure.rethrow();
  const auto device = static_cast<c10::DeviceIndex>(owner_->device);
  c10::cuda::CUDAGuard guard(device);
  if (!blocking_) {
    // Stream order, no host block: later kernels on the current stream see the result.
    done_.block(c10::cuda::getCurrentCUDAStream(device));
    return;
  }
  milliseconds limit = effective_timeout(timeout, owner_->timeout);
  auto start = Clock::now();
  while (!done_.query()) {
    owner_->failure.rethrow();
    if (Clock::now() - start > limit) {
      ZT_THROW_KIND(ErrorKind::kTimeout, "nccl ", info_.describe(), " timed out on rank ",
                    owner_->rank, " after ", limit.count(), " ms");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  owner_->failure.rethrow();
}

bool NcclWork::is_completed() {
  owner_->failure.rethrow();
  return done_.query();
}

}  // namespace
}  // namespace zt::dist

extern "C" __attribute__((visibility("default"))) bool zt_nccl_create_communicator(
    const zt::dist::NcclCreateArgs* args, std::shared_ptr<zt::dist::Communicator>* out,
    std::string* error) {
  try {
    *out = std::make_shared<zt::dist::NcclCommunicator>(*args);
    return true;
  } catch (const std::exception& e) {
    *error = e.what();
    return false;
  }
}

extern "C" __attribute__((visibility("default"))) int zt_nccl_device_count(char* why,
                                                                           size_t why_size) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess) return n;
  // No GPU, or no driver for one: a CPU machine, not a failure.
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) return 0;
  std::snprintf(why, why_size, "%s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
  return -1;
}
