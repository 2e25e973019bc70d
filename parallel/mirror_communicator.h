#pragma once
// A group of size() ranks, seen from rank(), in which every other rank holds what this rank
// holds, run in one process: each collective gives this rank's output shapes and makes the same
// allocations as the real one, without another process. The memory plan's activation probes run
// one rank's part of a split layer through it (models/llama/llama_memory.h): the all-to-alls of
// a sequence or expert exchange, a tensor split's all-reduce, with the buffers they make.
//
// The values are not a real group's: all_reduce and broadcast leave the tensor as it is,
// all_gather repeats this rank's input in every chunk, all_to_all returns to each chunk what this
// rank sent there (so an expert exchange receives as many rows as it sends, the balanced case).

#include <memory>
#include <string>

#include <c10/core/Device.h>

#include "parallel/communicator.h"

namespace zt::dist {

class MirrorCommunicator : public Communicator {
 public:
  // device: where the collectives take their tensors (the model's device).
  MirrorCommunicator(int rank, int size, c10::Device device);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& backend() const override { return backend_; }
  c10::Device device() const override { return device_; }

  WorkPtr all_reduce(at::Tensor& t, ReduceOp op = ReduceOp::kSum) override;
  WorkPtr reduce_scatter(const at::Tensor& input, at::Tensor& output,
                         ReduceOp op = ReduceOp::kSum) override;
  WorkPtr all_gather(const at::Tensor& input, at::Tensor& output) override;
  WorkPtr all_to_all(const at::Tensor& input, at::Tensor& output) override;
  WorkPtr broadcast(at::Tensor& t, int root) override;
  WorkPtr barrier() override;

 private:
  int rank_, size_;
  c10::Device device_;
  std::string backend_ = "mirror";
};

// A group of `size` mirrors seen from `rank`; null when size is 1 (no split).
std::shared_ptr<Communicator> mirror_group(int rank, int size, const c10::Device& device);

}  // namespace zt::dist
