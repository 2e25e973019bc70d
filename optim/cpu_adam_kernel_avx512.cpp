// AVX-512 build of the CpuAdam loop (compiled with -mavx512f -mavx512bw -mavx512vl; called only
// when the CPU has all three: BW+VL give the masked 16-bit stores of the half copy).
// adam_formula.h's fused update, 16 floats per iteration; the tail (< 16) uses masked loads and
// stores, so every element gets the fused rounding.
#include <immintrin.h>

#include "optim/cpu_adam_kernel.h"

namespace zt::optim::kernels {

namespace {

// kL2: see adam_scalar_impl.
template <bool kL2>
void adam_avx512_impl(const AdamArgs& a) {
  const AdamConstants& c = a.c;
  const __m512 b1 = _mm512_set1_ps(c.beta1), omb1 = _mm512_set1_ps(c.one_minus_beta1);
  const __m512 b2 = _mm512_set1_ps(c.beta2), omb2 = _mm512_set1_ps(c.one_minus_beta2);
  const __m512 eps = _mm512_set1_ps(c.eps), nss = _mm512_set1_ps(c.neg_step_size);
  const __m512 ibc2 = _mm512_set1_ps(c.inv_sqrt_bc2), decay = _mm512_set1_ps(c.decay_factor);
  const __m512 l2 = _mm512_set1_ps(c.l2_weight_decay);
  const __m512i round_bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  const __m512i qnan = _mm512_set1_epi32(0x7fc0);
  uint16_t* half = static_cast<uint16_t*>(a.half_out);
  for (int64_t i = 0; i < a.n; i += 16) {
    const int64_t left = a.n - i;
    const __mmask16 k = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
    __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, a.param + i), decay);
    const __m512 g = kL2 ? _mm512_fmadd_ps(l2, p, _mm512_maskz_loadu_ps(k, a.grad + i))
                         : _mm512_maskz_loadu_ps(k, a.grad + i);
    const __m512 m =
        _mm512_fmadd_ps(omb1, g, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, a.exp_avg + i), b1));
    const __m512 v = _mm512_fmadd_ps(omb2, _mm512_mul_ps(g, g),
                                     _mm512_mul_ps(_mm512_maskz_loadu_ps(k, a.exp_avg_sq + i), b2));
    const __m512 denom = _mm512_fmadd_ps(_mm512_sqrt_ps(v), ibc2, eps);
    p = _mm512_fmadd_ps(nss, _mm512_div_ps(m, denom), p);
    _mm512_mask_storeu_ps(a.param + i, k, p);
    _mm512_mask_storeu_ps(a.exp_avg + i, k, m);
    _mm512_mask_storeu_ps(a.exp_avg_sq + i, k, v);
    if (a.half_kind == HalfKind::kFloat16) {
      const __m256i h = _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm256_mask_storeu_epi16(half + i, k, h);
    } else if (a.half_kind == HalfKind::kBFloat16) {
      const __m512i bits = _mm512_castps_si512(p);
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), one);
      __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, round_bias), lsb), 16);
      const __mmask16 is_nan = _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q);
      r = _mm512_mask_mov_epi32(r, is_nan, qnan);
      _mm256_mask_storeu_epi16(half + i, k, _mm512_cvtepi32_epi16(r));
    }
  }
}

}  // namespace

void adam_avx512(const AdamArgs& a) {
  if (a.c.l2_weight_decay != 0) {
    adam_avx512_impl<true>(a);
  } else {
    adam_avx512_impl<false>(a);
  }
}

}  // namespace zt::optim::kernels
