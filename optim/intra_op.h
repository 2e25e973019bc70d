#pragma once
// The intra-op threads zerotorch's own loops run on. at::parallel_for is a header template that
// runs serially unless the calling library is compiled with OpenMP (scripts/cmake/ZtTorch.cmake,
// zt::torch_parallel): this reports what a loop in zt_optim actually gets.

#include <cstdint>

namespace zt::optim {

// The number of distinct threads one at::parallel_for over n elements (grain 1) ran on, from this
// library: at::get_num_threads() when the build is right, 1 when it silently is not.
int intra_op_width(int64_t n = 1 << 12);

}  // namespace zt::optim
