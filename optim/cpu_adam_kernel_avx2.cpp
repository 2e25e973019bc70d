// AVX2 + FMA + F16C build of the CpuAdam loop (compiled with -mavx2 -mfma -mf16c; called only
// when the CPU has them): adam_formula.h's fused update, 8 floats per iteration. The tail (< 8)
// goes through the same vector code on a zero-padded copy, so every element gets the fused
// rounding (a scalar tail would round the unfused way).
#include <cstring>
#include <immintrin.h>

#include "optim/cpu_adam_kernel.h"

namespace zt::optim::kernels {

namespace {

struct Vec {
  __m256 b1, omb1, b2, omb2, eps, nss, ibc2, decay, l2;
  __m256i round_bias, one, qnan;
  explicit Vec(const AdamConstants& c)
      : b1(_mm256_set1_ps(c.beta1)),
        omb1(_mm256_set1_ps(c.one_minus_beta1)),
        b2(_mm256_set1_ps(c.beta2)),
        omb2(_mm256_set1_ps(c.one_minus_beta2)),
        eps(_mm256_set1_ps(c.eps)),
        nss(_mm256_set1_ps(c.neg_step_size)),
        ibc2(_mm256_set1_ps(c.inv_sqrt_bc2)),
        decay(_mm256_set1_ps(c.decay_factor)),
        l2(_mm256_set1_ps(c.l2_weight_decay)),
        round_bias(_mm256_set1_epi32(0x7fff)),
        one(_mm256_set1_epi32(1)),
        qnan(_mm256_set1_epi32(0x7fc0)) {}
};

// 8 elements at p, g, m, v (and half, when kind says so). kL2: Adam's L2 term is compiled in
// only when used, as adam_update skips it when 0.
template <bool kL2>
inline void adam8(const Vec& k, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                  uint16_t* half, HalfKind kind) {
  __m256 p = _mm256_mul_ps(_mm256_loadu_ps(param), k.decay);
  const __m256 g = kL2 ? _mm256_fmadd_ps(k.l2, p, _mm256_loadu_ps(grad)) : _mm256_loadu_ps(grad);
  const __m256 m = _mm256_fmadd_ps(k.omb1, g, _mm256_mul_ps(_mm256_loadu_ps(exp_avg), k.b1));
  const __m256 v = _mm256_fmadd_ps(k.omb2, _mm256_mul_ps(g, g),
                                   _mm256_mul_ps(_mm256_loadu_ps(exp_avg_sq), k.b2));
  const __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(v), k.ibc2, k.eps);
  p = _mm256_fmadd_ps(k.nss, _mm256_div_ps(m, denom), p);
  _mm256_storeu_ps(param, p);
  _mm256_storeu_ps(exp_avg, m);
  _mm256_storeu_ps(exp_avg_sq, v);
  if (kind == HalfKind::kFloat16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(half),
                     _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  } else if (kind == HalfKind::kBFloat16) {
    const __m256i bits = _mm256_castps_si256(p);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), k.one);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, k.round_bias), lsb), 16);
    const __m256 is_nan = _mm256_cmp_ps(p, p, _CMP_UNORD_Q);
    r = _mm256_blendv_epi8(r, k.qnan, _mm256_castps_si256(is_nan));
    // 8 x int32 (all < 2^16) -> 8 x uint16: pack within lanes, then gather the two lanes.
    const __m256i packed = _mm256_packus_epi32(r, r);
    const __m256i ordered = _mm256_permute4x64_epi64(packed, 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(half), _mm256_castsi256_si128(ordered));
  }
}

template <bool kL2>
void adam_avx2_impl(const AdamArgs& a) {
  const Vec k(a.c);
  uint16_t* half = static_cast<uint16_t*>(a.half_out);
  const int64_t n8 = a.n & ~int64_t{7};
  for (int64_t i = 0; i < n8; i += 8) {
    adam8<kL2>(k, a.param + i, a.grad + i, a.exp_avg + i, a.exp_avg_sq + i,
               half ? half + i : nullptr, a.half_kind);
  }
  const int64_t rest = a.n - n8;
  if (rest == 0) return;
  // Zero padding is harmless: p = g = m = v = 0 gives denom = eps > 0, so no trap and no NaN
  // (and the padded lanes are never stored back).
  float p[8] = {}, g[8] = {}, m[8] = {}, v[8] = {};
  uint16_t h[8] = {};
  const size_t bytes = static_cast<size_t>(rest) * sizeof(float);
  std::memcpy(p, a.param + n8, bytes);
  std::memcpy(g, a.grad + n8, bytes);
  std::memcpy(m, a.exp_avg + n8, bytes);
  std::memcpy(v, a.exp_avg_sq + n8, bytes);
  adam8<kL2>(k, p, g, m, v, h, half ? a.half_kind : HalfKind::kNone);
  std::memcpy(a.param + n8, p, bytes);
  std::memcpy(a.exp_avg + n8, m, bytes);
  std::memcpy(a.exp_avg_sq + n8, v, bytes);
  if (half) std::memcpy(half + n8, h, static_cast<size_t>(rest) * sizeof(uint16_t));
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
