#pragma once
// Pieces both AVX2 builds share (cpu_adam_kernel_avx2.cpp, adam8bit_kernel_avx2.cpp): Adam's
// constants broadcast to 8 lanes, the 16-bit copy of 8 updated parameters, and the zero-padded
// tail. Include only from translation units compiled with -mavx2 -mf16c. Everything here has
// internal linkage (an anonymous namespace), so no unit built without AVX2 can end up calling
// this ISA's copy.
#include <cstring>
#include <immintrin.h>

#include "optim/cpu_adam_kernel.h"

namespace zt::optim::kernels {
namespace {

// AdamConstants in every lane, set once per pass. Only broadcasts: each build keeps its own
// arithmetic (fused in CpuAdam's, unfused in Adam8bit's), and nothing here rounds.
struct AdamConstants8 {
  __m256 b1, omb1, b2, omb2, eps, nss, ibc2, decay, l2, gs;
  explicit AdamConstants8(const AdamConstants& c)
      : b1(_mm256_set1_ps(c.beta1)),
        omb1(_mm256_set1_ps(c.one_minus_beta1)),
        b2(_mm256_set1_ps(c.beta2)),
        omb2(_mm256_set1_ps(c.one_minus_beta2)),
        eps(_mm256_set1_ps(c.eps)),
        nss(_mm256_set1_ps(c.neg_step_size)),
        ibc2(_mm256_set1_ps(c.inv_sqrt_bc2)),
        decay(_mm256_set1_ps(c.decay_factor)),
        l2(_mm256_set1_ps(c.l2_weight_decay)),
        gs(_mm256_set1_ps(c.grad_scale)) {}
};

// Writes the fp16 or bf16 bits of p's 8 floats to half (round to nearest even; bf16 NaN becomes
// a quiet NaN, as float_to_bf16_bits); kNone writes nothing.
inline void store_half8(__m256 p, uint16_t* half, HalfKind kind) {
  if (kind == HalfKind::kFloat16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(half),
                     _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  } else if (kind == HalfKind::kBFloat16) {
    const __m256i bits = _mm256_castps_si256(p);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256 is_nan = _mm256_cmp_ps(p, p, _CMP_UNORD_Q);
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), _mm256_castps_si256(is_nan));
    // 8 x int32 (all < 2^16) -> 8 x uint16: pack within lanes, then gather the two lanes.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(half), _mm256_castsi256_si128(packed));
  }
}

// The last n (< 8) elements through an 8-wide update: update8(p, g, m, v, h, kind) runs on
// zero-padded copies, and the n real lanes are written back. Zero padding is harmless:
// p = g = m = v = 0 gives denom = eps > 0, so no trap and no NaN, and padded lanes are never
// stored.
template <typename Update8>
void padded_tail(int64_t n, float* param, const float* grad, float* m_io, float* v_io,
                 uint16_t* half, HalfKind kind, Update8 update8) {
  float p[8] = {}, g[8] = {}, m[8] = {}, v[8] = {};
  uint16_t h[8] = {};
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  std::memcpy(p, param, bytes);
  std::memcpy(g, grad, bytes);
  std::memcpy(m, m_io, bytes);
  std::memcpy(v, v_io, bytes);
  update8(p, g, m, v, h, half ? kind : HalfKind::kNone);
  std::memcpy(param, p, bytes);
  std::memcpy(m_io, m, bytes);
  std::memcpy(v_io, v, bytes);
  if (half) std::memcpy(half, h, static_cast<size_t>(n) * sizeof(uint16_t));
}

}  // namespace
}  // namespace zt::optim::kernels
