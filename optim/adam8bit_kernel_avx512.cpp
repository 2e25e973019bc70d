// AVX-512 build of Adam8bit's block pass (adam8bit_kernel.h; compiled with -mavx512f -mavx512bw
// -mavx512vl -ffp-contract=off): 16 elements per iteration, table look-ups as register permutes
// (Table256) and the bucket gather, the tail of each pass masked; update and absmax shared with
// the VBMI build (adam8bit_avx512_passes.h). No multiply-add is fused, so every element rounds as
// the scalar build.
#include <immintrin.h>

#include "optim/adam8bit_avx512_passes.h"
#include "optim/adam8bit_kernel.h"

namespace zt::optim::kernels {

namespace {

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

// Pass 1: scratch = map[code] * absmax. Each iteration also prefetches a line of the next block
// (the four 16-element table loops reach its 12 bytes per element).
void decode(const uint8_t* codes, int64_t n, const QuantTables& t, float absmax, float* out,
            NextBlockPrefetch& pf) {
  const Table256 map(t.map);
  const __m512 scale = _mm512_set1_ps(absmax);
  for (int64_t k = 0; k < n; k += 16) {
    pf.step(1);
    const __mmask16 m = tail(n - k);
    store(out + k, m, _mm512_mul_ps(map[load_codes(codes + k, m)], scale));
  }
}

// Pass 4: codes of x * inv: the bucket's code (a gather: 64 Ki entries), then up past each
// midpoint below x (register look-ups); a line of the next block prefetched per iteration.
void encode(const float* x, int64_t n, float inv, const QuantTables& t, uint8_t* codes,
            NextBlockPrefetch& pf) {
  const Table256 mid(t.mid);
  const __m512 scale = _mm512_set1_ps(inv);
  const __m512i byte = _mm512_set1_epi32(0xff);
  const __m512i one = _mm512_set1_epi32(1);
  for (int64_t k = 0; k < n; k += 16) {
    pf.step(1);
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

// Pass 4 when every bucket holds at most one midpoint (QuantTables::bucket_step, the dynamic maps):
// one gather gives the bucket's code and its step threshold, and the step is an integer compare
// on x's low 16 bits, so no midpoint is looked up.
void encode_one_step(const float* x, int64_t n, float inv, const QuantTables& t, uint8_t* codes,
                     NextBlockPrefetch& pf) {
  const __m512 scale = _mm512_set1_ps(inv);
  for (int64_t k = 0; k < n; k += 16) {
    pf.step(1);
    const __mmask16 msk = tail(n - k);
    // The code is the low byte of each int.
    const __m128i bytes =
        _mm512_cvtepi32_epi8(one_step_codes(_mm512_mul_ps(load(x + k, msk), scale), t));
    if (msk == kAll) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + k), bytes);
    } else {
      _mm_mask_storeu_epi8(codes + k, msk, bytes);
    }
  }
}

}  // namespace

void adam8bit_block_avx512(const Adam8bitBlock& a) {
  block_passes<decode, encode_one_step, encode>(a);
}

}  // namespace zt::optim::kernels
