// AVX2 build of Adam8bit's block pass (adam8bit_kernel.h; compiled with -mavx2 -mf16c
// -ffp-contract=off): 8 elements per iteration, table look-ups as gathers. A pass's tail (< 8)
// runs the same vector code on a zero-padded copy, and no multiply-add is fused, so every element
// rounds as the scalar build.
#include <cstring>
#include <immintrin.h>

#include "optim/adam8bit_kernel.h"
#include "optim/adam8bit_prefetch.h"
#include "optim/avx2_tail.h"

namespace zt::optim::kernels {

namespace {

// Runs body(offset, count == 8 or the tail) over [begin, end): full groups of 8 in place, the
// tail through the caller's padded copy.
template <typename Full, typename Tail>
void for_each_8(int64_t begin, int64_t end, Full full, Tail tail_fn) {
  int64_t k = begin;
  for (; k + 8 <= end; k += 8) full(k);
  if (k < end) tail_fn(k, end - k);
}

__m256i load_codes(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

void decode8(const uint8_t* codes, const QuantTables& t, __m256 scale, float* out) {
  _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_i32gather_ps(t.map, load_codes(codes), 4), scale));
}

// Each iteration also prefetches a line of the next block (the four 8-element table loops reach
// its 12 bytes per element).
void decode(const uint8_t* codes, int64_t n, const QuantTables& t, float absmax, float* out,
            NextBlockPrefetch& pf) {
  const __m256 scale = _mm256_set1_ps(absmax);
  for_each_8(
      0, n,
      [&](int64_t k) {
        pf.step(1);
        decode8(codes + k, t, scale, out + k);
      },
      [&](int64_t k, int64_t left) {
        uint8_t c[8] = {};
        float o[8];
        std::memcpy(c, codes + k, static_cast<size_t>(left));
        decode8(c, t, scale, o);
        std::memcpy(out + k, o, static_cast<size_t>(left) * sizeof(float));
      });
}

// adam_update<false> on 8 elements, one rounding per operation; then the 16-bit copy.
template <bool kL2>
void update8(const AdamConstants8& c, float* param, const float* grad, float* m_io, float* v_io,
             uint16_t* half, HalfKind kind) {
  __m256 g = _mm256_mul_ps(_mm256_loadu_ps(grad), c.gs);
  __m256 p = _mm256_mul_ps(_mm256_loadu_ps(param), c.decay);
  if (kL2) g = _mm256_add_ps(_mm256_mul_ps(c.l2, p), g);
  const __m256 m =
      _mm256_add_ps(_mm256_mul_ps(c.omb1, g), _mm256_mul_ps(_mm256_loadu_ps(m_io), c.b1));
  const __m256 v = _mm256_add_ps(_mm256_mul_ps(c.omb2, _mm256_mul_ps(g, g)),
                                 _mm256_mul_ps(_mm256_loadu_ps(v_io), c.b2));
  const __m256 denom = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(v), c.ibc2), c.eps);
  p = _mm256_add_ps(_mm256_mul_ps(c.nss, _mm256_div_ps(m, denom)), p);
  _mm256_storeu_ps(param, p);
  _mm256_storeu_ps(m_io, m);
  _mm256_storeu_ps(v_io, v);
  store_half8(p, half, kind);
}

template <bool kL2>
void update(const Adam8bitBlock& a, const BlockSegment& seg) {
  const AdamConstants8 c(seg.c);
  uint16_t* half = static_cast<uint16_t*>(a.half_out);
  for_each_8(
      seg.begin, seg.end,
      [&](int64_t k) {
        update8<kL2>(c, a.param + k, a.grad + k, a.m_scratch + k, a.v_scratch + k,
                     half ? half + k : nullptr, a.half_kind);
      },
      [&](int64_t k, int64_t left) {
        padded_tail(left, a.param + k, a.grad + k, a.m_scratch + k, a.v_scratch + k,
                    half ? half + k : nullptr, a.half_kind,
                    [&](float* p, float* g, float* m, float* v, uint16_t* h, HalfKind kind) {
                      update8<kL2>(c, p, g, m, v, h, kind);
                    });
      });
}

float reduce_max(__m256 x) {
  __m128 y = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  y = _mm_max_ps(y, _mm_movehl_ps(y, y));
  y = _mm_max_ss(y, _mm_shuffle_ps(y, y, 1));
  return _mm_cvtss_f32(y);
}

// max(|m|) and max(v); max_ps(x, acc) returns acc when x is NaN, as std::max(acc, x). The padded
// tail adds zeros, which never exceed the accumulators (>= 0).
void absmax(const Adam8bitBlock& a, float* m_out, float* v_out) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 mmax = _mm256_setzero_ps(), vmax = _mm256_setzero_ps();
  auto step = [&](const float* m, const float* v) {
    mmax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(m), abs_mask), mmax);
    vmax = _mm256_max_ps(_mm256_loadu_ps(v), vmax);
  };
  for_each_8(
      0, a.n, [&](int64_t k) { step(a.m_scratch + k, a.v_scratch + k); },
      [&](int64_t k, int64_t left) {
        float m[8] = {}, v[8] = {};
        std::memcpy(m, a.m_scratch + k, static_cast<size_t>(left) * sizeof(float));
        std::memcpy(v, a.v_scratch + k, static_cast<size_t>(left) * sizeof(float));
        step(m, v);
      });
  *m_out = reduce_max(mmax);
  *v_out = reduce_max(vmax);
}

void encode8(const float* x, __m256 scale, const QuantTables& t, uint8_t* codes) {
  const __m256 y = _mm256_mul_ps(_mm256_loadu_ps(x), scale);
  const __m256i bucket = _mm256_srli_epi32(_mm256_castps_si256(y), 16);
  __m256i code = _mm256_and_si256(
      _mm256_i32gather_epi32(reinterpret_cast<const int*>(t.bucket_code), bucket, 1),
      _mm256_set1_epi32(0xff));
  // The bucket's code plus its thresholds below y (they grow with j: stop at the first none pass).
  for (int32_t j = 0; j < t.max_steps; ++j) {
    const __m256 threshold = _mm256_i32gather_ps(t.bucket_thresholds + j * 65536, bucket, 4);
    const __m256i up = _mm256_castps_si256(_mm256_cmp_ps(threshold, y, _CMP_LT_OQ));
    if (_mm256_testz_si256(up, up)) break;
    code = _mm256_sub_epi32(code, up);  // up lanes are -1
  }
  // 8 x int32 (all <= 255) -> 8 bytes.
  const __m256i w = _mm256_packus_epi32(code, code);  // 16-bit, lanes interleaved
  const __m256i b = _mm256_packus_epi16(w, w);        // 8-bit
  const __m256i ordered = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(codes), _mm256_castsi256_si128(ordered));
}

// The same when every bucket holds at most one midpoint (QuantTables::bucket_step, the dynamic
// maps): one gather gives the bucket's code and its step threshold, and the step is an integer
// compare on x's low 16 bits (key and threshold are below 2^16, so the signed compare serves).
void encode8_one_step(const float* x, __m256 scale, const QuantTables& t, uint8_t* codes) {
  const __m256i bits = _mm256_castps_si256(_mm256_mul_ps(_mm256_loadu_ps(x), scale));
  const __m256i entry = _mm256_i32gather_epi32(reinterpret_cast<const int*>(t.bucket_step),
                                               _mm256_srli_epi32(bits, 16), 4);
  // key(x): the low 16 bits, inverted where x is negative (arithmetic shift of the sign).
  const __m256i key = _mm256_and_si256(_mm256_xor_si256(bits, _mm256_srai_epi32(bits, 31)),
                                       _mm256_set1_epi32(0xffff));
  const __m256i up = _mm256_cmpgt_epi32(key, _mm256_srli_epi32(entry, 16));  // -1 where it steps
  const __m256i code =
      _mm256_and_si256(_mm256_sub_epi32(entry, up), _mm256_set1_epi32(0xff));  // the low byte
  const __m256i w = _mm256_packus_epi32(code, code);
  const __m256i b = _mm256_packus_epi16(w, w);
  const __m256i ordered = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(codes), _mm256_castsi256_si128(ordered));
}

void encode(const float* x, int64_t n, float inv, const QuantTables& t, uint8_t* codes,
            NextBlockPrefetch& pf) {
  const __m256 scale = _mm256_set1_ps(inv);
  const bool one_step = t.bucket_step != nullptr;
  auto encode8_any = [&](const float* in, uint8_t* out) {
    if (one_step) {
      encode8_one_step(in, scale, t, out);
    } else {
      encode8(in, scale, t, out);
    }
  };
  for_each_8(
      0, n,
      [&](int64_t k) {
        pf.step(1);
        encode8_any(x + k, codes + k);
      },
      [&](int64_t k, int64_t left) {
        float in[8] = {};
        uint8_t out[8];
        std::memcpy(in, x + k, static_cast<size_t>(left) * sizeof(float));
        encode8_any(in, out);
        std::memcpy(codes + k, out, static_cast<size_t>(left));
      });
}

}  // namespace

void adam8bit_block_avx2(const Adam8bitBlock& a) {
  NextBlockPrefetch pf(a.next);
  decode(a.m_code, a.n, a.m_tables, *a.m_absmax, a.m_scratch, pf);
  decode(a.v_code, a.n, a.v_tables, *a.v_absmax, a.v_scratch, pf);
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
  encode(a.m_scratch, a.n, mmax > 0 ? 1 / mmax : 0, a.m_tables, a.m_code, pf);
  encode(a.v_scratch, a.n, vmax > 0 ? 1 / vmax : 0, a.v_tables, a.v_code, pf);
}

}  // namespace zt::optim::kernels
