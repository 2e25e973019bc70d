#include "train/rank_sum.h"

#include <ATen/ATen.h>

namespace zt::train {

std::vector<double> sum_over_ranks(dist::Communicator& comm, const std::vector<double>& values) {
  // On the backend's device: NCCL takes only GPU tensors, the host backends only host ones.
  at::Tensor t = at::tensor(values, at::kDouble).to(comm.device());
  comm.all_reduce(t)->wait();
  t = t.cpu();
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

}  // namespace zt::train
