#pragma once
// MpiCommunicator: the Communicator over OpenMPI's non-blocking collectives (CPU tensors).
//
//   all_reduce      MPI_Iallreduce(MPI_IN_PLACE)             avg = sum, then t /= size()
//   reduce_scatter  MPI_Ireduce_scatter_block, or one MPI_Reduce per shard to its owner (below);
//                   avg likewise on the shard; output may be this rank's own shard of input
//                   (then input's other shards may be clobbered)
//   all_gather      MPI_Iallgather
//   all_to_all      MPI_Alltoall / MPI_Ialltoall (equal chunks)
//   broadcast       MPI_Ibcast
//   barrier         MPI_Ibarrier
//   split           MPI_Comm_split (blocking, collective over this communicator)
// fp16/bf16 reduce through user MPI ops that combine in fp32 and round back per step
// (mpi_runtime.h); integer avg is refused (an integer mean is not what a caller wants silently).
// Every collective runs on a private duplicate of its MPI communicator, issued and progressed by
// the process's MPI progress thread (mpi_runtime.h). Sizes above INT_MAX elements are refused.
//
// Blocking or non-blocking MPI calls: OpenMPI implements the non-blocking collectives (libnbc)
// with other algorithms than the blocking ones (coll/tuned). Either call runs on the progress
// thread, so the caller overlaps its computation with it either way; only the algorithm differs.
// Measured with bench/commbench (2 ranks, shared memory, a loaded shared machine, median of 5;
// busbw GB/s, blocking-on-progress-thread vs non-blocking): all_reduce 1.81 vs 0.94 at 1 MiB,
// 0.85 vs 0.35 at 4 MiB, 0.77 vs 0.22 at 16 MiB; all_gather 7.98 vs 1.67 at 1 MiB, 7.93 vs 1.62
// at 4 MiB; reduce_scatter 1.22 vs 1.26 at 1 MiB (a tie). So MpiMode::kAuto issues the blocking
// MPI_Allreduce / MPI_Reduce_scatter_block / MPI_Allgather / MPI_Alltoall (the same algorithms as a
// direct MPI call, which is what the commbench compares against) and keeps the non-blocking calls
// for broadcast and barrier. kNonBlocking keeps MPI_I* everywhere (useful where libnbc wins, and a
// blocking call that never completes also holds back later collectives of other communicators
// queued behind it on the progress thread).

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include <mpi.h>

#include "parallel/collective_info.h"
#include "parallel/communicator.h"
#include "parallel/desync.h"

namespace zt::dist {

enum class MpiMode { kAuto, kNonBlocking, kBlocking };
// "auto" | "nonblocking" | "blocking"; throws naming the bad value.
MpiMode parse_mpi_mode(const std::string& name);

class MpiCommunicator : public Communicator {
 public:
  // Worlds up to this size issue a blocking reduce_scatter as one MPI_Reduce per shard, to the
  // shard's owner (in place there), rather than MPI_Reduce_scatter_block, whose algorithms in
  // OpenMPI 4.1 first copy the whole input into scratch memory. The reduces cost each rank less
  // work (2 ranks: it receives and adds its half and copies nothing), which on a CPU rank is
  // taken from its computation; larger worlds keep the reduce-scatter, whose ring or halving
  // keeps every link busy at once where the owners' reduces would take turns.
  static constexpr int kPerOwnerReduceMaxRanks = 4;
  // Blocking collectives of at least this many bytes first wait for every peer to arrive while
  // sleeping (an MPI_Ibarrier tested every kPeerPollInterval), rather than in OpenMPI's polling
  // loop: mpi_communicator.cpp, await_peers. Smaller ones, whose whole time is near the
  // barrier's, go straight in.
  static constexpr int64_t kSleepWhilePeersArriveBytes = 1 << 20;
  static constexpr std::chrono::microseconds kPeerPollInterval{50};

  // Takes ownership of `comm` (a communicator private to zerotorch). store: the desync side
  // channel (may be null).
  MpiCommunicator(MPI_Comm comm, c10::intrusive_ptr<c10d::Store> store,
                  std::chrono::milliseconds timeout, MpiMode mode = MpiMode::kAuto);
  ~MpiCommunicator() override;

  // A communicator over a duplicate of MPI_COMM_WORLD (initialising MPI if needed).
  static std::shared_ptr<MpiCommunicator> create_world(c10::intrusive_ptr<c10d::Store> store,
                                                       std::chrono::milliseconds timeout,
                                                       MpiMode mode = MpiMode::kAuto);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& backend() const override { return backend_; }

  WorkPtr all_reduce(at::Tensor& t, ReduceOp op = ReduceOp::kSum) override;
  WorkPtr reduce_scatter(const at::Tensor& input, at::Tensor& output,
                         ReduceOp op = ReduceOp::kSum) override;
  WorkPtr all_gather(const at::Tensor& input, at::Tensor& output) override;
  WorkPtr all_to_all(const at::Tensor& input, at::Tensor& output) override;
  WorkPtr broadcast(at::Tensor& t, int root) override;
  WorkPtr barrier() override;
  std::shared_ptr<Communicator> split(const std::vector<int>& ranks) override;

  MPI_Comm mpi_comm() const { return comm_; }

 private:
  CollectiveInfo next(const char* kind, std::string detail);
  // Whether this collective of `bytes` uses the blocking MPI call (see MpiMode).
  bool blocking(const char* kind, int64_t bytes) const;

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  std::string backend_ = "mpi";
  c10::intrusive_ptr<c10d::Store> store_;
  std::shared_ptr<DesyncReporter> desync_;
  std::chrono::milliseconds timeout_;
  MpiMode mode_;
  uint64_t seq_ = 0;
  int splits_ = 0;
};

}  // namespace zt::dist
