// AVX2 + FMA build of the sum-of-squares loop (optim/sum_squares_kernel.h; compiled with -mavx2
// -mfma): four accumulators of four doubles are lanes 0-3, 4-7, 8-11 and 12-15.
#include <immintrin.h>

#include "optim/sum_squares_kernel.h"

namespace zt::optim::kernels {

double sum_squares_avx2(const float* x, int64_t n) {
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                    _mm256_setzero_pd()};
  const int64_t n16 = n & ~int64_t{15};
  for (int64_t i = 0; i < n16; i += 16) {
    for (int q = 0; q < 4; ++q) {
      const __m256d d = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * q));
      acc[q] = _mm256_fmadd_pd(d, d, acc[q]);
    }
  }
  alignas(32) double lanes[16];
  for (int q = 0; q < 4; ++q) _mm256_store_pd(lanes + 4 * q, acc[q]);
  double s = 0;
  for (double a : lanes) s += a;
  for (int64_t i = n16; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace zt::optim::kernels
