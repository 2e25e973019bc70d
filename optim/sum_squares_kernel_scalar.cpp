// Portable build of the sum-of-squares loop (optim/sum_squares_kernel.h).
#include "optim/sum_squares_kernel.h"

namespace zt::optim::kernels {

double sum_squares_scalar(const float* x, int64_t n) {
  double acc[16] = {};
  const int64_t n16 = n & ~int64_t{15};
  for (int64_t i = 0; i < n16; i += 16) {
    for (int k = 0; k < 16; ++k) acc[k] += static_cast<double>(x[i + k]) * x[i + k];
  }
  double s = 0;
  for (double a : acc) s += a;
  for (int64_t i = n16; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace zt::optim::kernels
