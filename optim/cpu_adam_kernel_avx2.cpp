// AVX2 + FMA + F16C build of the CpuAdam loop (compiled with -mavx2 -mfma -mf16c; called only
// when the CPU has them): adam_formula.h's fused update, 8 floats per iteration. The tail (< 8)
// goes through the same vector code on a zero-padded copy, so every element gets the fused
// rounding (a scalar tail would round the unfused way).
#include <immintrin.h>

#include "optim/avx2_tail.h"
#include "optim/cpu_adam_kernel.h"

namespace zt::optim::kernels {

namespace {

// 8 elements at p, g, m, v (and half, when kind says so). kL2: Adam's L2 term is compiled in
// only when used, as adam_update skips it when 0.
template <bool kL2>
inline void adam8(const AdamConstants8& k, float* param, const float* grad, float* exp_avg,
                  float* exp_avg_sq, uint16_t* half, HalfKind kind) {
  const __m256 gs = _mm256_mul_ps(_mm256_loadu_ps(grad), k.gs);
  __m256 p = _mm256_mul_ps(_mm256_loadu_ps(param), k.decay);
  const __m256 g = kL2 ? _mm256_fmadd_ps(k.l2, p, gs) : gs;
  const __m256 m = _mm256_fmadd_ps(k.omb1, g, _mm256_mul_ps(_mm256_loadu_ps(exp_avg), k.b1));
  const __m256 v = _mm256_fmadd_ps(k.omb2, _mm256_mul_ps(g, g),
                                   _mm256_mul_ps(_mm256_loadu_ps(exp_avg_sq), k.b2));
  const __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(v), k.ibc2, k.eps);
  p = _mm256_fmadd_ps(k.nss, _mm256_div_ps(m, denom), p);
  _mm256_storeu_ps(param, p);
  _mm256_storeu_ps(exp_avg, m);
  _mm256_storeu_ps(exp_avg_sq, v);
  store_half8(p, half, kind);
}

template <bool kL2>
void adam_avx2_impl(const AdamArgs& a) {
  const AdamConstants8 k(a.c);
  uint16_t* half = static_cast<uint16_t*>(a.half_out);
  const int64_t n8 = a.n & ~int64_t{7};
  for (int64_t i = 0; i < n8; i += 8) {
    adam8<kL2>(k, a.param + i, a.grad + i, a.exp_avg + i, a.exp_avg_sq + i,
               half ? half + i : nullptr, a.half_kind);
  }
  const int64_t rest = a.n - n8;
  if (rest == 0) return;
  padded_tail(rest, a.param + n8, a.grad + n8, a.exp_avg + n8, a.exp_avg_sq + n8,
              half ? half + n8 : nullptr, a.half_kind,
              [&](float* p, float* g, float* m, float* v, uint16_t* h, HalfKind kind) {
                adam8<kL2>(k, p, g, m, v, h, kind);
              });
}

}  // namespace

void adam_avx2(const AdamArgs& a) {
  if (a.c.l2_weight_decay != 0) {
    adam_avx2_impl<true>(a);
  } else {
    adam_avx2_impl<false>(a);
  }
}

}  // namespace zt::optim::kernels
