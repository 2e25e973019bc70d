// AVX-512 VBMI build of Adam8bit's block pass (adam8bit_kernel.h; compiled with -mavx512f
// -mavx512bw -mavx512vl -mavx512vbmi -ffp-contract=off): the AVX-512 build (its update and absmax
// passes are shared: adam8bit_avx512_passes.h) with the two table-bound passes, decode and encode,
// done 64 elements at a time: decode looks the map up on byte planes; encode gathers the bucket
// entries (QuantTables::bucket_step) for the dynamic maps, and for other maps looks the midpoints
// up on byte planes in its step loop. The 64 codes are packed and stored with byte permutes.
//
// A 256-entry float table is held as its 4 byte planes (QuantTables::map_planes, mid_planes),
// each 4 registers of 64 bytes. Looking 64 codes up in one plane is two 128-entry byte permutes
// (vpermi2b on code bits 0-6) and a blend on bit 7; the 4 planes' bytes are then interleaved into
// 64 floats by two rounds of unpacks. 64 floats cost 21 instructions, where the AVX-512 build's
// Table256 spends 18 on 16. The unpacks work inside 128-bit lanes, so the codes enter in "lane
// order" (byte 16 L + 4 q + j holds element 16 q + 4 L + j, L the lane, q the output register),
// which makes the 4 outputs come out as elements 0-15, 16-31, 32-47 and 48-63.
//
// The loops over the 4 registers of 64 elements are unrolled (#pragma GCC unroll 4) so that their
// arrays stay in registers; GCC otherwise keeps them on the stack.
//
// Every value is the table's exact bits and every arithmetic step is the AVX-512 build's, so the
// bytes equal the scalar build's (tests/unit/optim/adam8bit_test.cpp).
#include <immintrin.h>

#include "optim/adam8bit_avx512_passes.h"
#include "optim/adam8bit_kernel.h"

namespace zt::optim::kernels {

namespace {

// Masks for 16 elements with left of them in range (none when left <= 0) and for 64.
__mmask16 tail16(int64_t left) {
  if (left <= 0) return 0;
  return left >= 16 ? kAll : static_cast<__mmask16>((1u << left) - 1);
}

__mmask64 tail64(int64_t left) {
  return left >= 64 ? ~__mmask64{0} : (__mmask64{1} << left) - 1;
}

// 64 byte indices, for vpermb / vpermi2b.
struct ByteIndex {
  alignas(64) uint8_t b[64];
};

// Natural order -> lane order (see the file comment): lane-order byte 16 L + 4 q + j takes
// element 16 q + 4 L + j.
constexpr ByteIndex lane_order() {
  ByteIndex r{};
  for (int pos = 0; pos < 64; ++pos) {
    const int lane = pos / 16, q = pos / 4 % 4, j = pos % 4;
    r.b[pos] = static_cast<uint8_t>(16 * q + 4 * lane + j);
  }
  return r;
}

// 4 x 16 int32 codes (natural order, the code in each int's low byte) -> 64 lane-order bytes:
// registers 0 and 1 (q0 = 0) or 2 and 3 (q0 = 2) through a two-register byte permute, whose
// index 64 + i is byte i of the second register. Lane-order byte 16 L + 4 q + j is element
// 4 L + j of register q, the low byte of its int at byte 16 L + 4 j. Bytes of the other two
// registers are left 0 (the blend on kQ23 drops them).
constexpr ByteIndex pack_index(int q0) {
  ByteIndex r{};
  for (int pos = 0; pos < 64; ++pos) {
    const int lane = pos / 16, q = pos / 4 % 4, j = pos % 4;
    if (q == q0) r.b[pos] = static_cast<uint8_t>(16 * lane + 4 * j);
    if (q == q0 + 1) r.b[pos] = static_cast<uint8_t>(64 + 16 * lane + 4 * j);
  }
  return r;
}

// The same in natural order: byte 16 q + i is the low byte of int i of register q.
constexpr ByteIndex natural_pack_index(int q0) {
  ByteIndex r{};
  for (int pos = 0; pos < 64; ++pos) {
    const int q = pos / 16, i = pos % 16;
    if (q == q0) r.b[pos] = static_cast<uint8_t>(4 * i);
    if (q == q0 + 1) r.b[pos] = static_cast<uint8_t>(64 + 4 * i);
  }
  return r;
}

constexpr ByteIndex kLaneOrder = lane_order(), kPack01 = pack_index(0), kPack23 = pack_index(2);
constexpr ByteIndex kNaturalPack01 = natural_pack_index(0), kNaturalPack23 = natural_pack_index(2);
constexpr __mmask64 kQ23 = 0xff00ff00ff00ff00ull;         // lane-order bytes of registers 2 and 3
constexpr __mmask64 kNaturalQ23 = 0xffffffff00000000ull;  // natural-order ones

__m512i load64(const ByteIndex& index) {
  return _mm512_load_si512(index.b);
}

// 256 bytes in 4 registers, looked up 64 indices at a time.
struct ByteTable256 {
  __m512i t[4];
  explicit ByteTable256(const uint8_t* bytes) {
    for (int i = 0; i < 4; ++i) t[i] = _mm512_loadu_si512(bytes + 64 * i);
  }
  __m512i operator[](__m512i idx) const {
    const __m512i lo = _mm512_permutex2var_epi8(t[0], idx, t[1]);
    const __m512i hi = _mm512_permutex2var_epi8(t[2], idx, t[3]);
    return _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), lo, hi);
  }
};

// A 256-entry float table as 4 byte planes: 64 lane-order codes -> 4 x 16 floats, elements
// 16 q .. 16 q + 15 in out[q].
struct FloatTable256 {
  ByteTable256 b0, b1, b2, b3;
  explicit FloatTable256(const uint8_t* planes)
      : b0(planes), b1(planes + 256), b2(planes + 512), b3(planes + 768) {}
  void lookup(__m512i idx, __m512 out[4]) const {
    const __m512i p0 = b0[idx], p1 = b1[idx], p2 = b2[idx], p3 = b3[idx];
    // Bytes 0-1 and 2-3 of each float as 16-bit words, then the words as 32-bit floats.
    const __m512i w01l = _mm512_unpacklo_epi8(p0, p1), w01h = _mm512_unpackhi_epi8(p0, p1);
    const __m512i w23l = _mm512_unpacklo_epi8(p2, p3), w23h = _mm512_unpackhi_epi8(p2, p3);
    out[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(w01l, w23l));
    out[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(w01l, w23l));
    out[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(w01h, w23h));
    out[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(w01h, w23h));
  }
};

// 3 lines of the next block are prefetched per iteration: the four 64-element loops (decode and
// encode, m and v) reach the next block's 12 bytes per element.
constexpr int kPrefetchLines = 3;

// Pass 1: scratch = map[code] * absmax, 64 codes per iteration.
void decode(const uint8_t* codes, int64_t n, const QuantTables& t, float absmax, float* out,
            NextBlockPrefetch& pf) {
  const FloatTable256 map(t.map_planes);
  const __m512 scale = _mm512_set1_ps(absmax);
  const __m512i order = load64(kLaneOrder);
  for (int64_t k = 0; k < n; k += 64) {
    pf.step(kPrefetchLines);
    const __mmask64 km = tail64(n - k);
    const __m512i c = km == ~__mmask64{0} ? _mm512_loadu_si512(codes + k)
                                          : _mm512_maskz_loadu_epi8(km, codes + k);
    __m512 v[4];
    map.lookup(_mm512_permutexvar_epi8(order, c), v);
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      store(out + k + 16 * q, tail16(n - k - 16 * q), _mm512_mul_ps(v[q], scale));
    }
  }
}

// The low bytes of code[0..3]'s ints, 64 in natural order, stored at once at out (only the first
// `left` of them when fewer than 64 are left). natural01/23: load64(kNaturalPack01/23).
inline void store_codes64(const __m512i code[4], __m512i natural01, __m512i natural23, uint8_t* out,
                          int64_t left) {
  const __m512i bytes =
      _mm512_mask_blend_epi8(kNaturalQ23, _mm512_permutex2var_epi8(code[0], natural01, code[1]),
                             _mm512_permutex2var_epi8(code[2], natural23, code[3]));
  const __mmask64 km = tail64(left);
  if (km == ~__mmask64{0}) {
    _mm512_storeu_si512(out, bytes);
  } else {
    _mm512_mask_storeu_epi8(out, km, bytes);
  }
}

// Pass 4 when every bucket holds at most one midpoint (QuantTables::bucket_step, the dynamic maps):
// one gather gives the bucket's code and its step threshold, and the step is an integer compare
// on x's low 16 bits, so no midpoint is looked up.
void encode_one_step(const float* x, int64_t n, float inv, const QuantTables& t, uint8_t* codes,
                     NextBlockPrefetch& pf) {
  const __m512 scale = _mm512_set1_ps(inv);
  const __m512i natural01 = load64(kNaturalPack01), natural23 = load64(kNaturalPack23);
  for (int64_t k = 0; k < n; k += 64) {
    pf.step(kPrefetchLines);
    __m512i code[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      // Lanes past n hold 0, whose bucket is inside the table.
      const __m512 y = _mm512_mul_ps(load(x + k + 16 * q, tail16(n - k - 16 * q)), scale);
      code[q] = one_step_codes(y, t);  // the code is the low byte
    }
    store_codes64(code, natural01, natural23, codes + k, n - k);
  }
}

// Pass 4: codes of x * inv, 64 per iteration: the bucket's code (a gather: 64 Ki entries), then
// up past each midpoint below x, the midpoints looked up on byte planes.
void encode(const float* x, int64_t n, float inv, const QuantTables& t, uint8_t* codes,
            NextBlockPrefetch& pf) {
  const FloatTable256 mid(t.mid_planes);
  const __m512 scale = _mm512_set1_ps(inv);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i pack01 = load64(kPack01), pack23 = load64(kPack23);
  const __m512i natural01 = load64(kNaturalPack01), natural23 = load64(kNaturalPack23);
  for (int64_t k = 0; k < n; k += 64) {
    pf.step(kPrefetchLines);
    __mmask16 msk[4];
    __m512 y[4];
    __m512i code[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      // Lanes past n hold 0, whose bucket is inside the table.
      msk[q] = tail16(n - k - 16 * q);
      y[q] = _mm512_mul_ps(load(x + k + 16 * q, msk[q]), scale);
      const __m512i bucket = _mm512_srli_epi32(_mm512_castps_si512(y[q]), 16);
      // The code is the gathered int's low byte; its other 3 bytes are the next buckets' codes,
      // left in place: a step adds 1 only to a code below 255, so it never carries into them.
      code[q] = _mm512_i32gather_epi32(bucket, t.bucket_code, 1);
    }
    for (int32_t j = 0; j < t.max_steps; ++j) {
      const __m512i idx =
          _mm512_mask_blend_epi8(kQ23, _mm512_permutex2var_epi8(code[0], pack01, code[1]),
                                 _mm512_permutex2var_epi8(code[2], pack23, code[3]));
      __m512 m[4];
      mid.lookup(idx, m);
      // mid[255] = +inf: a lane at code 255 never steps, as the scalar loop's code < 255.
      __mmask16 up[4];
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) up[q] = _mm512_cmp_ps_mask(m[q], y[q], _CMP_LT_OQ);
      // No lane passed its midpoint, so none passes the next one either.
      if ((up[0] | up[1] | up[2] | up[3]) == 0) break;
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) code[q] = _mm512_mask_add_epi32(code[q], up[q], code[q], one);
    }
    store_codes64(code, natural01, natural23, codes + k, n - k);
  }
}

}  // namespace

void adam8bit_block_avx512vbmi(const Adam8bitBlock& a) {
  block_passes<decode, encode_one_step, encode>(a);
}

}  // namespace zt::optim::kernels
