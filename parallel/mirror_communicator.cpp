#include "parallel/mirror_communicator.h"

#include <ATen/ATen.h>

#include "base/error.h"

namespace zt::dist {
namespace {

class MirrorWork : public Work {
 public:
  void wait(std::chrono::milliseconds) override {}
  bool is_completed() override { return true; }
};

WorkPtr mirrored() {
  return std::make_shared<MirrorWork>();
}

}  // namespace

MirrorCommunicator::MirrorCommunicator(int rank, int size, c10::Device device)
    : rank_(rank), size_(size), device_(device) {
  ZT_CHECK(size > 0 && rank >= 0 && rank < size, "MirrorCommunicator: rank ", rank,
           " is not in a group of ", size);
}

WorkPtr MirrorCommunicator::all_reduce(at::Tensor&, ReduceOp) {
  return mirrored();
}

WorkPtr MirrorCommunicator::reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp) {
  ZT_CHECK(input.numel() == output.numel() * size_,
           "MirrorCommunicator::reduce_scatter: input must hold size() outputs");
  const int64_t n = output.numel();
  output.view({-1}).copy_(input.reshape({-1}).narrow(0, rank_ * n, n));
  return mirrored();
}

WorkPtr MirrorCommunicator::all_gather(const at::Tensor& input, at::Tensor& output) {
  const int64_t n = input.numel();
  ZT_CHECK(output.numel() == n * size_,
           "MirrorCommunicator::all_gather: output must hold size() inputs");
  at::Tensor flat = output.view({-1});
  const at::Tensor in = input.reshape({-1});
  for (int r = 0; r < size_; ++r) {
    at::Tensor chunk = flat.narrow(0, r * n, n);
    if (!chunk.is_same(in) && chunk.data_ptr() != in.data_ptr()) chunk.copy_(in);
  }
  return mirrored();
}

WorkPtr MirrorCommunicator::all_to_all(const at::Tensor& input, at::Tensor& output) {
  ZT_CHECK(input.numel() == output.numel(),
           "MirrorCommunicator::all_to_all: input and output must be the same size");
  output.view({-1}).copy_(input.reshape({-1}));
  return mirrored();
}

WorkPtr MirrorCommunicator::broadcast(at::Tensor&, int) {
  return mirrored();
}

WorkPtr MirrorCommunicator::barrier() {
  return mirrored();
}

std::shared_ptr<Communicator> mirror_group(int rank, int size, const c10::Device& device) {
  if (size <= 1) return nullptr;
  return std::make_shared<MirrorCommunicator>(rank, size, device);
}

}  // namespace zt::dist
