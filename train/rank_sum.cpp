#include "train/rank_sum.h"

#include <ATen/ATen.h>

namespace zt::train {

std::vector<double> sum_over_ranks(dist::Communicator& comm, const std::vector<double>& values) {
  at::Tensor t = at::tensor(values, at::kDouble);
  comm.all_reduce(t)->wait();
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

}  // namespace zt::train
