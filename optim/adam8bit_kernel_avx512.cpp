// AVX-512 build of Adam8bit's block pass (adam8bit_kernel.h; compiled with -mavx512f -mavx512bw
// -mavx512vl -ffp-contract=off): 16 elements per iteration, table look-ups as gathers, the tail
// of each pass masked. No multiply-add is fused, so every element rounds as the scalar build.
#include <immintrin.h>

#include "optim/adam8bit_kernel.h"

namespace zt::optim::kernels {

namespace {

constexpr __mmask16 kAll = 0xffff;

__mmask16 tail(int64_t left) {
  return left >= 16 ? kAll : static_cast<__mmask16>((1u << left) - 1);
}

// 16 codes -> 16 int32 indices (masked-off lanes read nothing and are 0).
__m512i load_codes(const uint8_t* p, __mmask16 k) {
  return _mm512_cvtepu8_epi32(k == kAll ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                                        : _mm_maskz_loadu_epi8(k, p));
}

__m512 load(const float* p, __mmask16 k) {
  return k == kAll ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(k, p);
}

void store(float* p, __mmask16 k, __m512 x) {
  if (k == kAll) {
    _mm512_storeu_ps(p, x);
  } else {
    _mm512_mask_storeu_ps(p, k, x);
  }
}

// A 256-entry float table held in 16 registers: a look-up by code is 8 two-register permutes and
// 7 blends on the code's top 3 bits, about 2.5x faster than a 16-lane gather on AMD Zen.
struct Table256 {
  __m512 t[16];
  explicit Table256(const float* values) {
    for (int i = 0; i < 16; ++i) t[i] = _mm512_loadu_ps(values + 16 * i);
  }
  __m512 operator[](__m512i code) const {
    __m512 a[8];
    for (int i = 0; i < 8; ++i) a[i] = _mm512_permutex2var_ps(t[2 * i], code, t[2 * i + 1]);
    const __mmask16 b5 = _mm512_test_epi32_mask(code, _mm512_set1_epi32(32));
    const __mmask16 b6 = _mm512_test_epi32_mask(code, _mm512_set1_epi32(64));
    const __mmask16 b7 = _mm512_test_epi32_mask(code, _mm512_set1_epi32(128));
    for (int i = 0; i < 4; ++i) a[i] = _mm512_mask_blend_ps(b5, a[2 * i], a[2 * i + 1]);
    for (int i = 0; i < 2; ++i) a[i] = _mm512_mask_blend_ps(b6, a[2 * i], a[2 * i + 1]);
    return _mm512_mask_blend_ps(b7, a[0], a[1]);
  }
};

// Pass 1: scratch = map[code] * absmax.
void decode(const uint8_t* codes, int64_t n, const QuantTables& t, float absmax, float* out) {
  const Table256 map(t.map);
  const __m512 scale = _mm512_set1_ps(absmax);
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 m = tail(n - k);
    store(out + k, m, _mm512_mul_ps(map[load_codes(codes + k, m)], scale));
  }
}

// Pass 2 on one segment: adam_update<false>, one rounding per operation.
template <bool kL2>
void update(const Adam8bitBlock& a, const BlockSegment& seg) {
  const AdamConstants& c = seg.c;
  const __m512 b1 = _mm512_set1_ps(c.beta1), omb1 = _mm512_set1_ps(c.one_minus_beta1);
  const __m512 b2 = _mm512_set1_ps(c.beta2), omb2 = _mm512_set1_ps(c.one_minus_beta2);
  const __m512 eps = _mm512_set1_ps(c.eps), nss = _mm512_set1_ps(c.neg_step_size);
  const __m512 ibc2 = _mm512_set1_ps(c.inv_sqrt_bc2), decay = _mm512_set1_ps(c.decay_factor);
  const __m512 l2 = _mm512_set1_ps(c.l2_weight_decay), gs = _mm512_set1_ps(c.grad_scale);
  const __m512i round_bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  const __m512i qnan = _mm512_set1_epi32(0x7fc0);
  uint16_t* half = static_cast<uint16_t*>(a.half_out);
  for (int64_t k = seg.begin; k < seg.end; k += 16) {
    const __mmask16 msk = tail(seg.end - k);
    __m512 p = _mm512_mul_ps(load(a.param + k, msk), decay);
    __m512 g = _mm512_mul_ps(load(a.grad + k, msk), gs);
    if (kL2) g = _mm512_add_ps(_mm512_mul_ps(l2, p), g);
    const __m512 m =
        _mm512_add_ps(_mm512_mul_ps(omb1, g), _mm512_mul_ps(load(a.m_scratch + k, msk), b1));
    const __m512 v = _mm512_add_ps(_mm512_mul_ps(omb2, _mm512_mul_ps(g, g)),
                                   _mm512_mul_ps(load(a.v_scratch + k, msk), b2));
    const __m512 denom = _mm512_add_ps(_mm512_mul_ps(_mm512_sqrt_ps(v), ibc2), eps);
    p = _mm512_add_ps(_mm512_mul_ps(nss, _mm512_div_ps(m, denom)), p);
    store(a.param + k, msk, p);
    store(a.m_scratch + k, msk, m);
    store(a.v_scratch + k, msk, v);
    if (a.half_kind == HalfKind::kNone) continue;
    __m256i h;
    if (a.half_kind == HalfKind::kFloat16) {
      h = _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
      const __m512i bits = _mm512_castps_si512(p);
      const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), one);
      const __m512i r =
          _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, round_bias), lsb), 16);
      h = _mm512_cvtepi32_epi16(
          _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q), qnan));
    }
    if (msk == kAll) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(half + k), h);
    } else {
      _mm256_mask_storeu_epi16(half + k, msk, h);
    }
  }
}

// Pass 3: max(|m|) and max(v); max_ps(x, acc) returns acc when x is NaN, as std::max(acc, x).
void absmax(const Adam8bitBlock& a, float* m_out, float* v_out) {
  __m512 mmax = _mm512_setzero_ps(), vmax = _mm512_setzero_ps();
  for (int64_t k = 0; k < a.n; k += 16) {
    const __mmask16 msk = tail(a.n - k);
    mmax = _mm512_max_ps(_mm512_abs_ps(load(a.m_scratch + k, msk)), mmax);
    vmax = _mm512_max_ps(load(a.v_scratch + k, msk), vmax);
  }
  *m_out = _mm512_reduce_max_ps(mmax);
  *v_out = _mm512_reduce_max_ps(vmax);
}

// Pass 4: codes of x * inv: the bucket's code (a gather: 64 Ki entries), then up past each
// midpoint below x (register look-ups).
void encode(const float* x, int64_t n, float inv, const QuantTables& t, uint8_t* codes) {
  const Table256 mid(t.mid);
  const __m512 scale = _mm512_set1_ps(inv);
  const __m512i byte = _mm512_set1_epi32(0xff);
  const __m512i one = _mm512_set1_epi32(1);
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 msk = tail(n - k);
    const __m512 y = _mm512_mul_ps(load(x + k, msk), scale);
    const __m512i bucket = _mm512_srli_epi32(_mm512_castps_si512(y), 16);
    __m512i code = _mm512_and_si512(_mm512_i32gather_epi32(bucket, t.bucket_code, 1), byte);
    for (int32_t j = 0; j < t.max_steps; ++j) {
      // mid[255] = +inf: a lane at code 255 never steps, as the scalar loop's code < 255.
      const __mmask16 up = _mm512_cmp_ps_mask(mid[code], y, _CMP_LT_OQ);
      if (up == 0) break;  // no lane passed its midpoint, so none passes the next one either
      code = _mm512_mask_add_epi32(code, up, code, one);
    }
    const __m128i bytes = _mm512_cvtepi32_epi8(code);
    if (msk == kAll) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + k), bytes);
    } else {
      _mm_mask_storeu_epi8(codes + k, msk, bytes);
    }
  }
}

}  // namespace

void adam8bit_block_avx512(const Adam8bitBlock& a) {
  decode(a.m_code, a.n, a.m_tables, *a.m_absmax, a.m_scratch);
  decode(a.v_code, a.n, a.v_tables, *a.v_absmax, a.v_scratch);
  for (int32_t s = 0; s < a.num_segments; ++s) {
    if (a.segments[s].c.l2_weight_decay != 0) {
      update<true>(a, a.segments[s]);
    } else {
      update<false>(a, a.segments[s]);
    }
  }
  float mmax = 0, vmax = 0;
  absmax(a, &mmax, &vmax);
  *a.m_absmax = mmax;
  *a.v_absmax = vmax;
  encode(a.m_scratch, a.n, mmax > 0 ? 1 / mmax : 0, a.m_tables, a.m_code);
  encode(a.v_scratch, a.n, vmax > 0 ? 1 / vmax : 0, a.v_tables, a.v_code);
}

}  // namespace zt::optim::kernels
