#pragma once
// MpiCommunicator: the Communicator over OpenMPI's non-blocking collectives (CPU tensors).
//
//   all_reduce      MPI_Iallreduce(MPI_IN_PLACE)             avg = sum, then t /= size()
//   reduce_scatter  MPI_Ireduce_scatter_block                avg likewise on the shard; output
//                   may be this rank's own shard of input (then input's other shards are
//                   clobbered)
//   all_gather      MPI_Iallgather
//   broadcast       MPI_Ibcast
//   barrier         MPI_Ibarrier
//   split           MPI_Comm_split (blocking, collective over this communicator)
// fp16/bf16 reduce through user MPI ops that combine in fp32 and round back per step
// (mpi_runtime.h); integer avg is refused (an integer mean is not what a caller wants silently).
// Every collective runs on a private duplicate of its MPI communicator, issued and progressed by
// the process's MPI progress thread (mpi_runtime.h). Sizes above INT_MAX elements are refused.

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include <mpi.h>

#include "parallel/collective_info.h"
#include "parallel/communicator.h"
#include "parallel/desync.h"

namespace zt::dist {

class MpiCommunicator : public Communicator {
 public:
  // Takes ownership of `comm` (a communicator private to zerotorch). store: the desync side
  // channel (may be null).
  MpiCommunicator(MPI_Comm comm, c10::intrusive_ptr<c10d::Store> store,
                  std::chrono::milliseconds timeout);
  ~MpiCommunicator() override;

  // A communicator over a duplicate of MPI_COMM_WORLD (initialising MPI if needed).
  static std::shared_ptr<MpiCommunicator> create_world(c10::intrusive_ptr<c10d::Store> store,
                                                       std::chrono::milliseconds timeout);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& backend() const override { return backend_; }

  WorkPtr all_reduce(at::Tensor& t, ReduceOp op = ReduceOp::kSum) override;
  WorkPtr reduce_scatter(const at::Tensor& input, at::Tensor& output,
                         ReduceOp op = ReduceOp::kSum) override;
  WorkPtr all_gather(const at::Tensor& input, at::Tensor& output) override;
  WorkPtr broadcast(at::Tensor& t, int root) override;
  WorkPtr barrier() override;
  std::shared_ptr<Communicator> split(const std::vector<int>& ranks) override;

  MPI_Comm mpi_comm() const { return comm_; }

 private:
  CollectiveInfo next(const char* kind, std::string detail);

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  std::string backend_ = "mpi";
  c10::intrusive_ptr<c10d::Store> store_;
  std::shared_ptr<DesyncReporter> desync_;
  std::chrono::milliseconds timeout_;
  uint64_t seq_ = 0;
  int splits_ = 0;
};

}  // namespace zt::dist
