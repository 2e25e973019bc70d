#include "optim/intra_op.h"

#include <atomic>

#include <ATen/Parallel.h>

namespace zt::optim {

int intra_op_width(int64_t n) {
  std::atomic<int> chunks{0};
  // ATen's OpenMP backend gives each thread of the region one contiguous chunk.
  at::parallel_for(0, n, 1, [&](int64_t, int64_t) { chunks.fetch_add(1); });
  return chunks.load();
}

}  // namespace zt::optim
