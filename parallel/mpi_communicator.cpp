#include "parallel/mpi_communicator.h"

#include <climits>
#include <thread>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "base/error.h"
#include "parallel/async_work.h"
#include "parallel/mpi_runtime.h"

namespace zt::dist {
namespace {

void check_mpi_tensor(const at::Tensor& t, const char* what, const char* op) {
  ZT_CHECK(t.defined(), "mpi ", op, ": ", what, " is undefined");
  ZT_CHECK(t.device().is_cpu(), "mpi ", op, ": ", what, " is on ", t.device(),
           "; the mpi backend takes CPU tensors (use nccl for CUDA)");
  ZT_CHECK(t.is_contiguous(), "mpi ", op, ": ", what, " must be contiguous");
  ZT_CHECK(t.numel() <= INT_MAX, "mpi ", op, ": ", what, " has ", t.numel(),
           " elements; MPI counts are limited to ", INT_MAX, " (split the buffer)");
}

void check_mpi_reduce(ReduceOp op, const at::Tensor& t, const char* name) {
  ZT_CHECK(!(op == ReduceOp::kAvg && c10::isIntegralType(t.scalar_type(), /*includeBool=*/true)),
           "mpi ", name, ": avg of integer tensors (", t.scalar_type(),
           ") is not supported; use sum and divide");
}

// Raises on an MPI error code from a start function (runs on the progress thread).
void check_rc(int rc, const char* call) {
  if (rc != MPI_SUCCESS) ZT_THROW_KIND(ErrorKind::kComm, call, ": ", mpi::error_string(rc));
}

// Returns once every rank of `comm` has reached this point, sleeping between tests of an
// MPI_Ibarrier, before a large blocking collective (MpiCommunicator::kSleepWhilePeersArriveBytes).
// Inside a blocking call OpenMPI polls until the last peer arrives, yielding only: a thread that
// yields stays runnable and keeps a fair share of a core, so with a rank's cores all computing,
// the progress thread took up to half of one from its compute thread for as long as a peer was
// late. A sleeping thread takes nothing; the cost is up to one sleep of latency when this rank
// was the early one.
bool sleeps_first(bool blocking_call, int64_t bytes) {
  return blocking_call && bytes >= MpiCommunicator::kSleepWhilePeersArriveBytes;
}

void await_peers(MPI_Comm comm) {
  MPI_Request request = MPI_REQUEST_NULL;
  check_rc(MPI_Ibarrier(comm, &request), "MPI_Ibarrier");
  int done = 0;
  for (int tests = 0;; ++tests) {
    check_rc(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    if (tests >= 2) std::this_thread::sleep_for(MpiCommunicator::kPeerPollInterval);
  }
}

}  // namespace

MpiMode parse_mpi_mode(const std::string& name) {
  if (name == "auto") return MpiMode::kAuto;
  if (name == "nonblocking") return MpiMode::kNonBlocking;
  if (name == "blocking") return MpiMode::kBlocking;
  ZT_THROW("mpi mode must be auto, nonblocking or blocking, got '", name, "'");
}

bool MpiCommunicator::blocking(const char* kind, int64_t /*bytes*/) const {
  if (mode_ != MpiMode::kAuto) return mode_ == MpiMode::kBlocking;
  const std::string k = kind;
  return k == "all_reduce" || k == "reduce_scatter" || k == "all_gather" || k == "all_to_all";
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, c10::intrusive_ptr<c10d::Store> store,
                                 std::chrono::milliseconds timeout, MpiMode mode)
    : comm_(comm), store_(std::move(store)), timeout_(timeout), mode_(mode) {
  mpi::run_sync([&] {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // Errors come back as codes and become zt::Error naming the call, instead of aborting.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  });
  desync_ = std::make_shared<DesyncReporter>(store_, rank_, size_, backend_);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || comm_ == MPI_COMM_NULL) return;
  try {
    MPI_Comm comm = comm_;
    // Comm_free is non-collective in effect and lets in-flight operations finish first.
    mpi::run_sync([comm]() mutable { MPI_Comm_free(&comm); });
  } catch (...) {
    // Exiting after a failure: nothing more to release.
  }
}

std::shared_ptr<MpiCommunicator> MpiCommunicator::create_world(
    c10::intrusive_ptr<c10d::Store> store, std::chrono::milliseconds timeout, MpiMode mode) {
  mpi::ensure_initialized();
  MPI_Comm comm = MPI_COMM_NULL;
  mpi::run_sync([&] { check_rc(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup"); });
  return std::make_shared<MpiCommunicator>(comm, std::move(store), timeout, mode);
}

CollectiveInfo MpiCommunicator::next(const char* kind, std::string detail) {
  CollectiveInfo info;
  info.seq = ++seq_;
  info.kind = kind;
  info.detail = std::move(detail);
  return info;
}

namespace {

// Wraps a start function into a submitted operation completing `work`.
WorkPtr launch(std::shared_ptr<AsyncWork> work, std::function<MPI_Request()> start,
               std::function<void()> finish = {}) {
  mpi::Operation op;
  op.start = std::move(start);
  op.finish = std::move(finish);
  op.done = [work](const std::string& error) {
    if (error.empty()) {
      work->complete();
    } else {
      work->fail(error);
    }
  };
  mpi::submit(std::move(op));
  return work;
}

}  // namespace

WorkPtr MpiCommunicator::all_reduce(at::Tensor& t, ReduceOp op) {
  check_mpi_tensor(t, "tensor", "all_reduce");
  check_mpi_reduce(op, t, "all_reduce");
  auto work = std::make_shared<AsyncWork>(
      next("all_reduce", detail::str(to_string(op), ", ", describe_tensor(t))), desync_, timeout_);
  at::Tensor tensor = t;  // keeps the storage alive while in flight
  MPI_Datatype type = mpi::datatype(t.scalar_type());
  MPI_Op mpi_op = mpi::reduce_op(op, t.scalar_type());
  MPI_Comm comm = comm_;
  int size = size_;
  if (t.numel() == 0 || size_ == 1) {
    return launch(work, [] { return MPI_REQUEST_NULL; });
  }
  const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
  const bool block = blocking("all_reduce", bytes);
  const bool sleep_first = sleeps_first(block, bytes);
  return launch(
      work,
      [tensor, type, mpi_op, comm, block, sleep_first]() mutable {
        MPI_Request r = MPI_REQUEST_NULL;
        const int n = static_cast<int>(tensor.numel());
        if (sleep_first) await_peers(comm);
        if (block) {
          check_rc(MPI_Allreduce(MPI_IN_PLACE, tensor.data_ptr(), n, type, mpi_op, comm),
                   "MPI_Allreduce");
        } else {
          check_rc(MPI_Iallreduce(MPI_IN_PLACE, tensor.data_ptr(), n, type, mpi_op, comm, &r),
                   "MPI_Iallreduce");
        }
        return r;
      },
      [tensor, op, size]() mutable {
        if (op == ReduceOp::kAvg) tensor.div_(size);
      });
}

WorkPtr MpiCommunicator::reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) {
  check_mpi_tensor(input, "input", "reduce_scatter");
  check_mpi_tensor(output, "output", "reduce_scatter");
  check_mpi_reduce(op, input, "reduce_scatter");
  ZT_CHECK(input.scalar_type() == output.scalar_type(), "mpi reduce_scatter: input is ",
           input.scalar_type(), " but output is ", output.scalar_type());
  ZT_CHECK(input.numel() == output.numel() * size_, "mpi reduce_scatter: input has ", input.numel(),
           " elements, expected size() * output.numel() = ", size_, " * ", output.numel());
  auto work = std::make_shared<AsyncWork>(
      next("reduce_scatter", detail::str(to_string(op), ", ", describe_tensor(input))), desync_,
      timeout_);
  at::Tensor in = input, out = output;
  MPI_Datatype type = mpi::datatype(input.scalar_type());
  MPI_Op mpi_op = mpi::reduce_op(op, input.scalar_type());
  MPI_Comm comm = comm_;
  int size = size_;
  const int64_t shard_bytes = output.numel() * static_cast<int64_t>(output.element_size());
  const char* in_begin = static_cast<const char*>(input.data_ptr());
  const char* out_begin = static_cast<const char*>(output.data_ptr());
  const bool aliased =
      out_begin < in_begin + shard_bytes * size_ && in_begin < out_begin + shard_bytes;
  // ZeRO reduces a flat gradient buffer into this rank's own slice of it. MPI forbids aliased
  // send/receive buffers, so MPI_Reduce_scatter_block runs that case with MPI_IN_PLACE over the
  // whole input (the result lands in its first shard) and the shard is copied to its place
  // afterwards; the rest of the input then holds partial sums.
  ZT_CHECK(!aliased || out_begin == in_begin + shard_bytes * rank_,
           "mpi reduce_scatter: output overlaps input but is not this rank's shard of it");
  if (output.numel() == 0) return launch(work, [] { return MPI_REQUEST_NULL; });
  if (size_ == 1) {
    return launch(work, [in, out]() mutable {
      if (out.data_ptr() != in.data_ptr()) out.copy_(in.view_as(out));
      return MPI_REQUEST_NULL;
    });
  }
  const bool block = blocking("reduce_scatter", shard_bytes * size_);
  // A reduce to each shard's owner instead, as DeepSpeed's stage 1-2 reduces a bucket's slices
  // (stage_1_and_2.py, average_tensor): the owner reduces into its shard in place and every other
  // rank only sends, so a rank copies no whole buffer. OpenMPI's reduce-scatter algorithms all
  // copy the whole input into a scratch buffer first (and in place, the shard out of it again).
  // Each rank still sends (n - 1) / n of the input in all, as in a ring; the owners take turns, so
  // large worlds, where a ring keeps every link busy at once, keep the reduce-scatter
  // (kPerOwnerReduceMaxRanks).
  const bool per_owner = block && size_ <= kPerOwnerReduceMaxRanks;
  const bool sleep_first = sleeps_first(block, shard_bytes * size_);
  const int rank = rank_;
  return launch(
      work,
      [in, out, type, mpi_op, comm, aliased, block, per_owner, sleep_first, size, rank,
       shard_bytes]() mutable {
        MPI_Request r = MPI_REQUEST_NULL;
        const int n = static_cast<int>(out.numel());
        if (sleep_first) await_peers(comm);
        if (per_owner) {
          char* base = static_cast<char*>(in.data_ptr());
          for (int owner = 0; owner < size; ++owner) {
            char* slice = base + shard_bytes * owner;
            const bool mine = owner == rank;
            const void* send = mine && aliased ? MPI_IN_PLACE : slice;
            check_rc(
                MPI_Reduce(send, mine ? out.data_ptr() : nullptr, n, type, mpi_op, owner, comm),
                "MPI_Reduce");
          }
          return r;
        }
        const void* send = aliased ? MPI_IN_PLACE : in.data_ptr();
        void* recv = aliased ? in.data_ptr() : out.data_ptr();
        if (block) {
          check_rc(MPI_Reduce_scatter_block(send, recv, n, type, mpi_op, comm),
                   "MPI_Reduce_scatter_block");
        } else {
          check_rc(MPI_Ireduce_scatter_block(send, recv, n, type, mpi_op, comm, &r),
                   "MPI_Ireduce_scatter_block");
        }
        return r;
      },
      [in, out, op, size, aliased, per_owner]() mutable {
        if (aliased && !per_owner && out.data_ptr() != in.data_ptr()) {
          out.copy_(in.view({-1}).narrow(0, 0, out.numel()).view_as(out));
        }
        if (op == ReduceOp::kAvg) out.div_(size);
      });
}

WorkPtr MpiCommunicator::all_gather(const at::Tensor& input, at::Tensor& output) {
  check_mpi_tensor(input, "input", "all_gather");
  check_mpi_tensor(output, "output", "all_gather");
  ZT_CHECK(input.scalar_type() == output.scalar_type(), "mpi all_gather: input is ",
           input.scalar_type(), " but output is ", output.scalar_type());
  ZT_CHECK(output.numel() == input.numel() * size_, "mpi all_gather: output has ", output.numel(),
           " elements, expected size() * input.numel() = ", size_, " * ", input.numel());
  auto work =
      std::make_shared<AsyncWork>(next("all_gather", describe_tensor(input)), desync_, timeout_);
  at::Tensor in = input, out = output;
  MPI_Datatype type = mpi::datatype(input.scalar_type());
  MPI_Comm comm = comm_;
  int rank = rank_;
  if (input.numel() == 0) return launch(work, [] { return MPI_REQUEST_NULL; });
  if (size_ == 1) {
    return launch(work, [in, out]() mutable {
      if (out.data_ptr() != in.data_ptr()) out.copy_(in.view_as(out));
      return MPI_REQUEST_NULL;
    });
  }
  const int64_t bytes = output.numel() * static_cast<int64_t>(output.element_size());
  const bool block = blocking("all_gather", bytes);
  const bool sleep_first = sleeps_first(block, bytes);
  return launch(work, [in, out, type, comm, rank, block, sleep_first]() mutable {
    MPI_Request r = MPI_REQUEST_NULL;
    int n = static_cast<int>(in.numel());
    // In place when the caller passes its own shard of the output (ZeRO's usual layout).
    const bool in_place = in.data_ptr() == static_cast<char*>(out.data_ptr()) +
                                               static_cast<int64_t>(rank) * n *
                                                   static_cast<int64_t>(in.element_size());
    const void* send = in_place ? MPI_IN_PLACE : in.data_ptr();
    if (sleep_first) await_peers(comm);
    if (block) {
      check_rc(MPI_Allgather(send, n, type, out.data_ptr(), n, type, comm), "MPI_Allgather");
    } else {
      check_rc(MPI_Iallgather(send, n, type, out.data_ptr(), n, type, comm, &r), "MPI_Iallgather");
    }
    return r;
  });
}

WorkPtr MpiCommunicator::all_to_all(const at::Tensor& input, at::Tensor& output) {
  check_mpi_tensor(input, "input", "all_to_all");
  check_mpi_tensor(output, "output", "all_to_all");
  check_all_to_all(input, output, size_, "mpi");
  auto work =
      std::make_shared<AsyncWork>(next("all_to_all", describe_tensor(input)), desync_, timeout_);
  at::Tensor in = input, out = output;
  MPI_Datatype type = mpi::datatype(input.scalar_type());
  MPI_Comm comm = comm_;
  if (input.numel() == 0) return launch(work, [] { return MPI_REQUEST_NULL; });
  if (size_ == 1) {
    return launch(work, [in, out]() mutable {
      out.copy_(in.view_as(out));
      return MPI_REQUEST_NULL;
    });
  }
  const int64_t bytes = input.numel() * static_cast<int64_t>(input.element_size());
  const bool block = blocking("all_to_all", bytes);
  const bool sleep_first = sleeps_first(block, bytes);
  const int n = static_cast<int>(input.numel() / size_);
  return launch(work, [in, out, type, comm, n, block, sleep_first]() mutable {
    MPI_Request r = MPI_REQUEST_NULL;
    if (sleep_first) await_peers(comm);
    if (block) {
      check_rc(MPI_Alltoall(in.data_ptr(), n, type, out.data_ptr(), n, type, comm), "MPI_Alltoall");
    } else {
      check_rc(MPI_Ialltoall(in.data_ptr(), n, type, out.data_ptr(), n, type, comm, &r),
               "MPI_Ialltoall");
    }
    return r;
  });
}

WorkPtr MpiCommunicator::broadcast(at::Tensor& t, int root) {
  check_mpi_tensor(t, "tensor", "broadcast");
  ZT_CHECK(root >= 0 && root < size_, "mpi broadcast: root ", root, " is outside 0..", size_ - 1);
  auto work = std::make_shared<AsyncWork>(
      next("broadcast", detail::str("root ", root, ", ", describe_tensor(t))), desync_, timeout_);
  at::Tensor tensor = t;
  MPI_Datatype type = mpi::datatype(t.scalar_type());
  MPI_Comm comm = comm_;
  if (t.numel() == 0 || size_ == 1) return launch(work, [] { return MPI_REQUEST_NULL; });
  return launch(work, [tensor, type, root, comm]() mutable {
    MPI_Request r;
    check_rc(MPI_Ibcast(tensor.data_ptr(), static_cast<int>(tensor.numel()), type, root, comm, &r),
             "MPI_Ibcast");
    return r;
  });
}

WorkPtr MpiCommunicator::barrier() {
  auto work = std::make_shared<AsyncWork>(next("barrier", ""), desync_, timeout_);
  MPI_Comm comm = comm_;
  if (size_ == 1) return launch(work, [] { return MPI_REQUEST_NULL; });
  return launch(work, [comm] {
    MPI_Request r;
    check_rc(MPI_Ibarrier(comm, &r), "MPI_Ibarrier");
    return r;
  });
}

std::shared_ptr<Communicator> MpiCommunicator::split(const std::vector<int>& ranks) {
  int index = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    ZT_CHECK(ranks[i] >= 0 && ranks[i] < size_, "mpi split: rank ", ranks[i], " is outside 0..",
             size_ - 1);
    if (ranks[i] == rank_) index = static_cast<int>(i);
  }
  int split_id = splits_++;
  ++seq_;  // a collective over this communicator like any other
  MPI_Comm sub = MPI_COMM_NULL;
  mpi::run_sync([&] {
    check_rc(MPI_Comm_split(comm_, index >= 0 ? 0 : MPI_UNDEFINED, index, &sub), "MPI_Comm_split");
  });
  if (index < 0) return nullptr;
  c10::intrusive_ptr<c10d::Store> store;
  if (store_) {
    store = c10::make_intrusive<c10d::PrefixStore>("split" + std::to_string(split_id), store_);
  }
  return std::make_shared<MpiCommunicator>(sub, store, timeout_, mode_);
}

}  // namespace zt::dist
