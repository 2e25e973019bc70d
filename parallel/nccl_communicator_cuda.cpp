// NcclCommunicator: the nccl backend, compiled into the CUDA plugin (libzt_cuda.so). Contract and
// stream timeline in nccl_communicator.h.
//
// Timeouts: wait() does not block the host (it orders LibTorch's current stream after the
// collective), so a hang cannot be seen in wait(). A watchdog thread per communicator polls the
// completion event of every collective in flight; one older than the timeout (counted from its
// enqueue) makes the watchdog abort the NCCL communicator (ncclCommAbort, which unblocks the
// stuck kernels) and record the desync timeout error, which every later call on the
// communicator and every wait()/is_completed() on its works raise. Like c10d's watchdog, a
// timed-out NCCL communicator is not usable again.
// Communicators are created non-blocking (ncclConfig_t.blocking = 0) so that a rank missing at
// initialisation is a timeout too, not a hang in ncclCommInitRank.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <nccl.h>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "core/base/error.h"
#include "parallel/async_work.h"
#include "parallel/collective_info.h"
#include "parallel/desync.h"
#include "parallel/nccl_communicator.h"

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

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}

// What works share with their communicator: its failure state. Works hold this, not the
// communicator, so the watchdog (which holds works) never owns the communicator it runs in.
struct NcclShared {
  int rank = 0;
  int device = 0;
  milliseconds timeout{0};
  std::mutex mutex;
  bool failed = false;
  ErrorKind failure_kind = ErrorKind::kComm;
  std::string failure;

  void rethrow_failure() {
    std::lock_guard<std::mutex> lock(mutex);
    if (failed) ZT_THROW_KIND(failure_kind, failure);
  }
};

// One collective: done_ is recorded on the NCCL stream after it.
class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<NcclShared> owner, CollectiveInfo info, bool blocking)
      : info_(std::move(info)), owner_(std::move(owner)), blocking_(blocking) {}

  void wait(milliseconds timeout) override;
  bool is_completed() override;

  CollectiveInfo info_;  // read by the watchdog
  at::cuda::CUDAEvent done_{cudaEventDisableTiming};
  Clock::time_point enqueued_ = Clock::now();
  std::vector<at::Tensor> keep_;  // storages stay alive until completion

 private:
  std::shared_ptr<NcclShared> owner_;
  bool blocking_;
};

class NcclCommunicator : public Communicator {
 public:
  explicit NcclCommunicator(const NcclCreateArgs& args)
      : shared_(std::make_shared<NcclShared>()),
        rank_(args.rank),
        size_(args.size),
        device_(args.device),
        store_(args.store),
        timeout_(args.timeout),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false,
                                             static_cast<c10::DeviceIndex>(args.device))) {
    shared_->rank = rank_;
    shared_->device = device_;
    shared_->timeout = timeout_;
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    ncclUniqueId id;
    if (rank_ == 0) {
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
      store_->set("nccl_id", std::vector<uint8_t>(bytes, bytes + sizeof(id)));
    }
    std::vector<uint8_t> got = store_->get("nccl_id");  // waits up to the store's timeout
    ZT_INTERNAL_ASSERT(got.size() == sizeof(id), "ncclUniqueId of ", got.size(), " bytes");
    std::memcpy(&id, got.data(), sizeof(id));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t rc = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    settle(rc, "ncclCommInitRankConfig", Clock::now() + timeout_);
    desync_ = std::make_shared<DesyncReporter>(store_, rank_, size_, backend_);
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    if (comm_ != nullptr) {
      if (shared_->failed) {
        ncclCommAbort(comm_);
      } else {
        ncclCommFinalize(comm_);
        settle(ncclSuccess, "ncclCommFinalize", Clock::now() + std::chrono::seconds(10), false);
        ncclCommDestroy(comm_);
      }
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& backend() const override { return backend_; }

  WorkPtr all_reduce(at::Tensor& t, ReduceOp op) override {
    check_tensor(t, "all_reduce");
    auto work = begin("all_reduce", detail::str(to_string(op), ", ", describe_tensor(t)), {t});
    if (t.numel() > 0) {
      enqueue(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.scalar_type()),
                            nccl_op(op), comm_, stream_.stream()),
              "ncclAllReduce");
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
      enqueue(
          ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(),
                            nccl_type(input.scalar_type()), nccl_op(op), comm_, stream_.stream()),
          "ncclReduceScatter");
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
      enqueue(ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(),
                            nccl_type(input.scalar_type()), comm_, stream_.stream()),
              "ncclAllGather");
    }
    return end(work);
  }

  WorkPtr broadcast(at::Tensor& t, int root) override {
    check_tensor(t, "broadcast");
    ZT_CHECK(root >= 0 && root < size_, "nccl broadcast: root ", root, " is outside 0..",
             size_ - 1);
    auto work = begin("broadcast", detail::str("root ", root, ", ", describe_tensor(t)), {t});
    if (t.numel() > 0) {
      enqueue(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t.scalar_type()), root,
                            comm_, stream_.stream()),
              "ncclBroadcast");
    }
    return end(work);
  }

  // A one-element all-reduce whose wait() blocks the host, as a barrier must.
  WorkPtr barrier() override {
    at::Tensor flag = at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(
                                         at::kCUDA, static_cast<c10::DeviceIndex>(device_)));
    auto work = begin("barrier", "", {flag}, /*blocking=*/true);
    enqueue(ncclAllReduce(flag.data_ptr(), flag.data_ptr(), 1, ncclInt32, ncclSum, comm_,
                          stream_.stream()),
            "ncclAllReduce");
    return end(work);
  }

  void rethrow_failure() { shared_->rethrow_failure(); }

 private:
  void check(ncclResult_t rc, const char* call) {
    if (rc != ncclSuccess && rc != ncclInProgress) {
      ZT_THROW_KIND(ErrorKind::kComm, call, " failed on rank ", rank_, ": ", ncclGetErrorString(rc),
                    " (", ncclGetLastError(comm_), ")");
    }
  }

  // Non-blocking communicators may answer ncclInProgress: poll until the call settled.
  void settle(ncclResult_t rc, const char* call, Clock::time_point deadline,
              bool throw_on_timeout = true) {
    check(rc, call);
    ncclResult_t state = rc;
    while (true) {
      if (comm_ != nullptr) ncclCommGetAsyncError(comm_, &state);
      if (state != ncclInProgress) break;
      if (Clock::now() > deadline) {
        if (!throw_on_timeout) return;
        ncclCommAbort(comm_);
        comm_ = nullptr;
        ZT_THROW_KIND(ErrorKind::kTimeout, call, " did not complete on rank ", rank_, " of ", size_,
                      " within ", timeout_.count(),
                      " ms (a rank never joined?); desync: ", desync_ ? desync_->report() : "");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    check(state, call);
  }

  void check_tensor(const at::Tensor& t, const char* op) {
    rethrow_failure();
    ZT_CHECK(t.defined() && t.is_cuda() && t.get_device() == device_, "nccl ", op,
             ": tensor must be on cuda:", device_, ", got ",
             t.defined() ? t.device().str() : "undefined");
    ZT_CHECK(t.is_contiguous(), "nccl ", op, ": tensor must be contiguous");
  }

  // Orders the NCCL stream after LibTorch's current stream and keeps the storages alive.
  std::shared_ptr<NcclWork> begin(const char* kind, std::string detail,
                                  std::vector<at::Tensor> tensors, bool blocking = false) {
    rethrow_failure();
    CollectiveInfo info;
    info.seq = ++seq_;
    info.kind = kind;
    info.detail = std::move(detail);
    auto work = std::make_shared<NcclWork>(shared_, std::move(info), blocking);
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    at::cuda::CUDAEvent ready(cudaEventDisableTiming);
    ready.record(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_)));
    ready.block(stream_);
    for (const at::Tensor& t : tensors) {
      // The caching allocator must not hand this memory out again before the NCCL stream
      // is done with it, even if the caller drops its tensor early.
      c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
    }
    work->keep_ = std::move(tensors);
    return work;
  }

  void enqueue(ncclResult_t rc, const char* call) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    settle(rc, call, Clock::now() + timeout_);
  }

  WorkPtr end(const std::shared_ptr<NcclWork>& work) {
    work->done_.record(stream_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      in_flight_.push_back(work);
    }
    cv_.notify_all();
    return work;
  }

  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      cv_.wait_for(lock, milliseconds(100));
      while (!in_flight_.empty()) {
        std::shared_ptr<NcclWork> w = in_flight_.front();
        if (w->done_.query()) {
          in_flight_.pop_front();
          continue;
        }
        auto age = std::chrono::duration_cast<milliseconds>(Clock::now() - w->enqueued_);
        if (age >= timeout_) {
          lock.unlock();
          std::string message;
          try {
            desync_->throw_timeout(w->info_, age, timeout_);
          } catch (const zt::Error& e) {
            message = e.message();
          }
          // Unblocks the stuck kernels on every stream of this communicator.
          ncclCommAbort(comm_);
          {
            std::lock_guard<std::mutex> failure_lock(shared_->mutex);
            shared_->failed = true;
            shared_->failure_kind = ErrorKind::kTimeout;
            shared_->failure = message;
          }
          lock.lock();
          comm_ = nullptr;
          in_flight_.clear();
          return;
        }
        break;
      }
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
  ncclComm_t comm_ = nullptr;
  std::shared_ptr<DesyncReporter> desync_;
  uint64_t seq_ = 0;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<NcclWork>> in_flight_;
  bool stop_ = false;
  std::thread watchdog_;
};

void NcclWork::wait(milliseconds timeout) {
  owner_->rethrow_failure();
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
    owner_->rethrow_failure();
    if (Clock::now() - start > limit) {
      ZT_THROW_KIND(ErrorKind::kTimeout, "nccl ", info_.describe(), " timed out on rank ",
                    owner_->rank, " after ", limit.count(), " ms");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  owner_->rethrow_failure();
}

bool NcclWork::is_completed() {
  owner_->rethrow_failure();
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

extern "C" __attribute__((visibility("default"))) int zt_nccl_device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}
