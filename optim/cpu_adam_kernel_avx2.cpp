// AVX2 + FMA + F16C build of the CpuAdam loop (compiled with -mavx2 -mfma -mf16c; called only
// when the CPU has them). 8 floats per iteration; the tail goes to the scalar build.
#include <immintrin.h>

#include "optim/cpu_adam_kernel.h"

namespace zt::optim::kernels {

namespace {

// kL2: see adam_scalar_impl.
template <bool kL2>
void adam_avx2_impl(const AdamArgs& a) {
  const __m256 b1 = _mm256_set1_ps(a.beta1), omb1 = _mm256_set1_ps(a.one_minus_beta1);
  const __m256 b2 = _mm256_set1_ps(a.beta2), omb2 = _mm256_set1_ps(a.one_minus_beta2);
  const __m256 eps = _mm256_set1_ps(a.eps), nss = _mm256_set1_ps(a.neg_step_size);
  const __m256 ibc2 = _mm256_set1_ps(a.inv_sqrt_bc2), decay = _mm256_set1_ps(a.decay_factor);
  const __m256 l2 = _mm256_set1_ps(a.l2_weight_decay);
  const __m256i round_bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  const __m256i qnan = _mm256_set1_epi32(0x7fc0);
  uint16_t* half = static_cast<uint16_t*>(a.half_out);
  const int64_t n8 = a.n & ~int64_t{7};
  for (int64_t i = 0; i < n8; i += 8) {
    __m256 p = _mm256_mul_ps(_mm256_loadu_ps(a.param + i), decay);
    const __m256 g =
        kL2 ? _mm256_fmadd_ps(l2, p, _mm256_loadu_ps(a.grad + i)) : _mm256_loadu_ps(a.grad + i);
    const __m256 m = _mm256_fmadd_ps(omb1, g, _mm256_mul_ps(_mm256_loadu_ps(a.exp_avg + i), b1));
    const __m256 v = _mm256_fmadd_ps(omb2, _mm256_mul_ps(g, g),
                                     _mm256_mul_ps(_mm256_loadu_ps(a.exp_avg_sq + i), b2));
    const __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(v), ibc2, eps);
    p = _mm256_fmadd_ps(nss, _mm256_div_ps(m, denom), p);
    _mm256_storeu_ps(a.param + i, p);
    _mm256_storeu_ps(a.exp_avg + i, m);
    _mm256_storeu_ps(a.exp_avg_sq + i, v);
    if (a.half_kind == HalfKind::kFloat16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(half + i),
                       _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    } else if (a.half_kind == HalfKind::kBFloat16) {
      const __m256i bits = _mm256_castps_si256(p);
      const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), one);
      __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, round_bias), lsb), 16);
      const __m256 is_nan = _mm256_cmp_ps(p, p, _CMP_UNORD_Q);
      r = _mm256_blendv_epi8(r, qnan, _mm256_castps_si256(is_nan));
      // 8 x int32 (all < 2^16) -> 8 x uint16: pack within lanes, then gather the two lanes.
      const __m256i packed = _mm256_packus_epi32(r, r);
      const __m256i ordered = _mm256_permute4x64_epi64(packed, 0x08);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(half + i), _mm256_castsi256_si128(ordered));
    }
  }
  if (n8 < a.n) {
    AdamArgs tail = a;
    tail.param += n8;
    tail.grad += n8;
    tail.exp_avg += n8;
    tail.exp_avg_sq += n8;
    if (half) tail.half_out = half + n8;
    tail.n = a.n - n8;
    adam_scalar(tail);
  }
}

}  // namespace

void adam_avx2(const AdamArgs& a) {
  if (a.l2_weight_decay != 0) {
    adam_avx2_impl<true>(a);
  } else {
    adam_avx2_impl<false>(a);
  }
}

}  // namespace zt::optim::kernels
