#pragma once
// Sums a few doubles over the ranks of a communicator in one all-reduce (losses, token counts,
// squared errors), so every rank gets the same totals.

#include <vector>

#include "parallel/communicator.h"

namespace zt::train {

std::vector<double> sum_over_ranks(dist::Communicator& comm, const std::vector<double>& values);

}  // namespace zt::train
