#pragma once
// zt::dist::Communicator: the only way the engine talks to other ranks (docs/DESIGN.md,
// Communicator).
//
// Contracts:
//  - Every rank calls collectives in the same order with the same sizes and dtypes.
//  - Each call returns at once with a Work; the tensors may be touched again only after wait().
//  - Tensors are contiguous; fp32, fp16, bf16 and integer dtypes. Uneven sizes are the caller's
//    job: flat buffers are padded to a multiple of size().
//  - Every wait has a timeout (CommOptions::timeout unless a shorter one is given); a timeout
//    raises zt::Error of kind kTimeout naming the collective, its sequence number, the rank and
//    the elapsed time, instead of hanging.
//  - An operation a backend cannot do fails loudly, naming backend and operation.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace zt::dist {

enum class ReduceOp { kSum, kAvg, kMax, kMin };
const char* to_string(ReduceOp op);

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective is complete, or throws after `timeout` (0 = the communicator's
  // default). For NCCL, wait() orders LibTorch's current stream after the collective instead of
  // blocking the host.
  virtual void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) = 0;
  // Non-blocking: true once wait() would return at once.
  virtual bool is_completed() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& backend() const = 0;
  // Where this backend's collectives take their tensors: the host for MPI and gloo, this rank's
  // GPU for NCCL. Small control tensors (votes, norms, fingerprints) are made here, so the same
  // code runs under every backend.
  virtual c10::Device device() const { return c10::Device(c10::kCPU); }

  // In place: t = op(t over all ranks).
  virtual WorkPtr all_reduce(at::Tensor& t, ReduceOp op = ReduceOp::kSum);
  // input: flat, numel == size() * output.numel() (shard r is input[r*n, (r+1)*n));
  // output: this rank's shard of op(input over all ranks).
  virtual WorkPtr reduce_scatter(const at::Tensor& input, at::Tensor& output,
                                 ReduceOp op = ReduceOp::kSum);
  // input: this rank's shard (n elements); output: flat size()*n, rank r's shard at [r*n, ...).
  // input may be output's own slice [rank*n, (rank+1)*n) (in place: ZeRO's publish of updated
  // shards); it may not overlap output otherwise.
  virtual WorkPtr all_gather(const at::Tensor& input, at::Tensor& output);
  // input: flat, size() * n elements, chunk j (input[j*n, (j+1)*n)) goes to rank j; output: flat
  // size() * n, chunk j is what rank j sent to this rank (ZeRO++'s gradient exchange). input and
  // output may not overlap.
  virtual WorkPtr all_to_all(const at::Tensor& input, at::Tensor& output);
  // In place: t = t on root.
  virtual WorkPtr broadcast(at::Tensor& t, int root);
  virtual WorkPtr barrier();
  // A communicator over a subset of ranks (every rank of this communicator calls it with the
  // same list; ranks not in the list get nullptr). The new communicator's rank i is ranks[i].
  virtual std::shared_ptr<Communicator> split(const std::vector<int>& ranks);

 protected:
  [[noreturn]] void unsupported(const char* operation) const;
};

}  // namespace zt::dist
