// AVX-512 build of the sum-of-squares loop (optim/sum_squares_kernel.h; compiled with
// -mavx512f): two accumulators of eight doubles are lanes 0-7 and 8-15.
#include <immintrin.h>

#include "optim/sum_squares_kernel.h"

namespace zt::optim::kernels {

double sum_squares_avx512(const float* x, int64_t n) {
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
  const int64_t n16 = n & ~int64_t{15};
  for (int64_t i = 0; i < n16; i += 16) {
    const __m512d a = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
    const __m512d b = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
    lo = _mm512_fmadd_pd(a, a, lo);
    hi = _mm512_fmadd_pd(b, b, hi);
  }
  alignas(64) double lanes[16];
  _mm512_store_pd(lanes, lo);
  _mm512_store_pd(lanes + 8, hi);
  double s = 0;
  for (double a : lanes) s += a;
  for (int64_t i = n16; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

}  // namespace zt::optim::kernels
