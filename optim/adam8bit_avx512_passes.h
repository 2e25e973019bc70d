#pragma once
// The passes both AVX-512 builds of Adam8bit's block pass share (adam8bit_kernel_avx512.cpp,
// adam8bit_kernel_avx512vbmi.cpp): masked loads and stores, the update (pass 2), the absmax
// (pass 3), the one-step code of pass 4 and the order of the passes; they differ only in how they
// decode, encode with the step loop, and pack codes. Include only from translation units
// compiled with -mavx512f -mavx512bw -mavx512vl -ffp-contract=off. Everything here has internal
// linkage (an anonymous namespace), so no unit built without AVX-512 can end up calling this
// ISA's copy.
#include <immintrin.h>

#include "optim/adam8bit_kernel.h"
#include "optim/adam8bit_prefetch.h"

namespace zt::optim::kernels {
namespace {

constexpr __mmask16 kAll = 0xffff;

inline __mmask16 tail(int64_t left) {
  return left >= 16 ? kAll : static_cast<__mmask16>((1u << left) - 1);
}

// 16 codes -> 16 int32 indices (masked-off lanes read nothing and are 0).
inline __m512i load_codes(const uint8_t* p, __mmask16 k) {
  return _mm512_cvtepu8_epi32(k == kAll ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                                        : _mm_maskz_loadu_epi8(k, p));
}

inline __m512 load(const float* p, __mmask16 k) {
  return k == kAll ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(k, p);
}

inline void store(float* p, __mmask16 k, __m512 x) {
  if (k == kAll) {
    _mm512_storeu_ps(p, x);
  } else {
    _mm512_mask_storeu_ps(p, k, x);
  }
}

// Pass 2 on one segment: adam_update<false>, one rounding per operation.
// The absmax of m and v is taken here too (into mmax, vmax: see absmax below), on the values just
// computed; lanes past the segment's end are 0 and change no maximum.
template <bool kL2>
void update(const Adam8bitBlock& a, const BlockSegment& seg, __m512& mmax, __m512& vmax) {
  const AdamConstants& c = seg.c;
  const __m512 b1 = _mm512_set1_ps(c.beta1), omb1 = _mm512_set1_ps(c.one_minus_beta1);
  const __m512 b2 = _mm512_set1_ps(c.beta2), omb2 = _mm512_set1_ps(c.one_minus_beta2);
  const __m512 eps = _mm512_set1_ps(c.eps), nss = _mm512_set1_ps(c.neg_step_size);
  const __m512 ibc2 = _mm512_set1_ps(c.inv_sqrt_bc2), decay = _mm512_set1_ps(c.decay_factor);
  const __m512 l2 = _mm512_set1_ps(c.l2_weight_decay), gs = _mm512_set1_ps(c.grad_scale);
  const __m512i round_bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  const __m512i qnan = _mm512_set1_epi32(0x7fc0);
  // Locals, not a's fields: the vector stores may alias anything, so GCC would reload every field
  // after each one.
  float* const param = a.param;
  const float* const grad = a.grad;
  float* const m_scratch = a.m_scratch;
  float* const v_scratch = a.v_scratch;
  const HalfKind half_kind = a.half_kind;
  uint16_t* const half = static_cast<uint16_t*>(a.half_out);
  for (int64_t k = seg.begin; k < seg.end; k += 16) {
    const __mmask16 msk = tail(seg.end - k);
    __m512 p = _mm512_mul_ps(load(param + k, msk), decay);
    __m512 g = _mm512_mul_ps(load(grad + k, msk), gs);
    if (kL2) g = _mm512_add_ps(_mm512_mul_ps(l2, p), g);
    const __m512 m =
        _mm512_add_ps(_mm512_mul_ps(omb1, g), _mm512_mul_ps(load(m_scratch + k, msk), b1));
    const __m512 v = _mm512_add_ps(_mm512_mul_ps(omb2, _mm512_mul_ps(g, g)),
                                   _mm512_mul_ps(load(v_scratch + k, msk), b2));
    const __m512 denom = _mm512_add_ps(_mm512_mul_ps(_mm512_sqrt_ps(v), ibc2), eps);
    p = _mm512_add_ps(_mm512_mul_ps(nss, _mm512_div_ps(m, denom)), p);
    store(param + k, msk, p);
    store(m_scratch + k, msk, m);
    store(v_scratch + k, msk, v);
    mmax = _mm512_max_ps(_mm512_abs_ps(m), mmax);
    vmax = _mm512_max_ps(v, vmax);
    if (half_kind == HalfKind::kNone) continue;
    __m256i h;
    if (half_kind == HalfKind::kFloat16) {
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

// Pass 3: max(|m|) and max(v); max_ps(x, acc) returns acc when x is NaN, as std::max(acc, x),
// so the result is the largest non-NaN value whatever order the elements are taken in.
inline void absmax(const Adam8bitBlock& a, __m512& mmax, __m512& vmax) {
  for (int64_t k = 0; k < a.n; k += 16) {
    const __mmask16 msk = tail(a.n - k);
    mmax = _mm512_max_ps(_mm512_abs_ps(load(a.m_scratch + k, msk)), mmax);
    vmax = _mm512_max_ps(load(a.v_scratch + k, msk), vmax);
  }
}

// Pass 2 over every segment, then pass 3 into the block's absmax; returns the two new absmax.
// When the segments tile the block (the usual case: one group covers it), pass 3 is the maxima
// pass 2 took on the way; otherwise elements no segment updates count too, so it reads the whole
// scratch again.
inline void update_and_absmax(const Adam8bitBlock& a, float* m_out, float* v_out) {
  __m512 mmax = _mm512_setzero_ps(), vmax = _mm512_setzero_ps();
  int64_t covered_to = 0;  // [0, covered_to) is covered while the segments stay contiguous
  for (int32_t s = 0; s < a.num_segments; ++s) {
    const BlockSegment& seg = a.segments[s];
    if (seg.begin == covered_to) covered_to = seg.end;
    if (seg.c.l2_weight_decay != 0) {
      update<true>(a, seg, mmax, vmax);
    } else {
      update<false>(a, seg, mmax, vmax);
    }
  }
  if (covered_to != a.n) absmax(a, mmax, vmax);
  *m_out = *a.m_absmax = _mm512_reduce_max_ps(mmax);
  *v_out = *a.v_absmax = _mm512_reduce_max_ps(vmax);
}

// Pass 4's one-step code (QuantTables::bucket_step) of 16 already scaled values: the gathered
// entry's low byte is the bucket's code, its high 16 bits the step threshold; the code steps up
// by one where key(y) (the low 16 bits, inverted where y is negative: an arithmetic shift of the
// sign) lies above the threshold. The result's low byte of each int is the code.
inline __m512i one_step_codes(__m512 y, const QuantTables& t) {
  const __m512i low16 = _mm512_set1_epi32(0xffff), one = _mm512_set1_epi32(1);
  const __m512i bits = _mm512_castps_si512(y);
  const __m512i entry = _mm512_i32gather_epi32(_mm512_srli_epi32(bits, 16), t.bucket_step, 4);
  const __m512i key = _mm512_and_si512(_mm512_xor_si512(bits, _mm512_srai_epi32(bits, 31)), low16);
  const __mmask16 up = _mm512_cmpgt_epu32_mask(key, _mm512_srli_epi32(entry, 16));
  return _mm512_mask_add_epi32(entry, up, entry, one);
}

// The four passes over one block, as both AVX-512 builds run them; they pass their own decode and
// encodes (one-step where the map allows it, QuantTables::bucket_step).
template <auto kDecode, auto kEncodeOneStep, auto kEncode>
void block_passes(const Adam8bitBlock& a) {
  // The next block's inputs are fetched across the four table-bound passes (Adam8bitNext).
  NextBlockPrefetch pf(a.next);
  kDecode(a.m_code, a.n, a.m_tables, *a.m_absmax, a.m_scratch, pf);
  kDecode(a.v_code, a.n, a.v_tables, *a.v_absmax, a.v_scratch, pf);
  float mmax = 0, vmax = 0;
  update_and_absmax(a, &mmax, &vmax);
  const float mi = mmax > 0 ? 1 / mmax : 0, vi = vmax > 0 ? 1 / vmax : 0;
  if (a.m_tables.bucket_step != nullptr) {
    kEncodeOneStep(a.m_scratch, a.n, mi, a.m_tables, a.m_code, pf);
  } else {
    kEncode(a.m_scratch, a.n, mi, a.m_tables, a.m_code, pf);
  }
  if (a.v_tables.bucket_step != nullptr) {
    kEncodeOneStep(a.v_scratch, a.n, vi, a.v_tables, a.v_code, pf);
  } else {
    kEncode(a.v_scratch, a.n, vi, a.v_tables, a.v_code, pf);
  }
}

}  // namespace
}  // namespace zt::optim::kernels
