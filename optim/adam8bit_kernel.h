#pragma once
// The CPU pass of Adam8bit over one quantization block, in four builds like CpuAdam's loop
// (cpu_adam_kernel.h): portable scalar, AVX2, AVX-512 F+BW+VL, and AVX-512 with VBMI (byte
// permutes; adam8bit.cpp picks it over the plain AVX-512 build where the CPU has it), each in its
// own translation unit with its own -m flags (optim/CMakeLists.txt). Those files include nothing
// but this header (and through it adam_formula.h, whose inline code they never call),
// <immintrin.h> and headers of internal-linkage code for them (avx2_tail.h,
// adam8bit_avx512_passes.h, adam8bit_prefetch.h).
//
// One block, four passes over data that stays in L1 (block_size 2048: 16 KiB of scratch):
//   1. decode m and v into fp32 scratch: map[code] * absmax (one rounding);
//   2. for each group segment of the block: adam_formula.h's unfused update (the 8-bit optimizer
//      rounds every multiply and add on its own on every device: adam_formula.h), the parameter
//      and its fp16/bf16 copy written back;
//   3. the new absmax of m (of |m|) and of v; NaN is skipped, as std::max(acc, NaN) keeps acc.
//      The AVX-512 builds take it during pass 2 when the segments tile the block;
//   4. encode m * (1 / absmax) and v * (1 / absmax) with the block-wise codec (blockwise_quant.h):
//      the code of the top 16 bits' bucket, then up past the midpoints x exceeds. When no bucket
//      holds two midpoints (max_steps == 1: the dynamic maps), the SIMD builds gather the bucket's
//      code and step threshold in one int (QuantTables::bucket_step) and step on an integer
//      compare of x's low bits. Otherwise the AVX2 build counts the midpoints from per-bucket
//      thresholds (the bucket's next midpoints), so every look-up is indexed by the bucket alone
//      and none waits for another, and the AVX-512 builds look mid[code] up in registers.
// The SIMD builds do each pass with vector loads, gathers and register look-ups and give the
// scalar build's bytes bit for bit (tests/unit/optim/adam8bit_test.cpp): no fused multiply-add
// anywhere (their files compile with -ffp-contract=off), the same per-element operations, and max
// is exact. Passes 1 and 4 are bound by instructions and pass 2 by memory, so the SIMD builds
// prefetch the next block's inputs during 1 and 4 (Adam8bitNext).

#include <cstdint>

#include "optim/adam_formula.h"
#include "optim/cpu_adam_kernel.h"

namespace zt::optim::kernels {

// A QuantCodec's tables (blockwise_quant.h), read-only.
struct QuantTables {
  const float* map;            // [256] sorted values
  const float* mid;            // [256] midpoints, mid[255] = +inf
  const uint8_t* bucket_code;  // [65536 + 3] code of the smallest float of each top-16-bit bucket
                               // (3 bytes of padding: the SIMD builds gather 4 bytes per lookup)
  int32_t max_steps;           // most midpoints any x lies above its bucket's code
  // [max_steps][65536]: threshold j of bucket h is mid[bucket_code[h] + j], or +inf past mid[254];
  // the code of x is bucket_code[h] + the number of thresholds below x (ordered compare).
  const float* bucket_thresholds;
  // [65536] when max_steps == 1 (else null): bucket h's code in bits 0-7 and, in bits 16-31, the
  // threshold of its one step: x in bucket h steps past mid[code] iff key(x) > threshold, key(x)
  // the low 16 bits of x, inverted for negative x (there a larger magnitude is a smaller value).
  // A bucket holds at most one midpoint when max_steps == 1, and mid[code] >= the bucket's
  // smallest value, so x > mid[code] only when that midpoint is in x's bucket; the threshold is
  // its key then, and 0xffff (never exceeded) otherwise or at code 255.
  const uint32_t* bucket_step;
  // [4][256]: byte p of map[i] and of mid[i] at [p][i] (little-endian), the byte planes the
  // AVX-512 VBMI build looks values up in, 64 codes per byte permute.
  const uint8_t* map_planes;
  const uint8_t* mid_planes;
};

// Elements [begin, end) of the block (offsets into it) updated with one group's constants.
struct BlockSegment {
  int64_t begin, end;
  AdamConstants c;
};

// The next block a thread will run, whose inputs a build may prefetch while this block computes:
// its passes are compute-bound, the next block's update would otherwise wait on memory. A hint
// only (null pointers: none); no build reads these bytes.
struct Adam8bitNext {
  const float* param = nullptr;
  const float* grad = nullptr;
  const uint8_t* m_code = nullptr;
  const uint8_t* v_code = nullptr;
  const void* half_out = nullptr;  // 2 bytes per element
  int64_t n = 0;
};

struct Adam8bitBlock {
  float* param;       // [n], updated in place
  const float* grad;  // [n]
  uint8_t* m_code;    // [n] in/out
  uint8_t* v_code;    // [n] in/out
  float* m_absmax;    // this block's absmax of m, in/out
  float* v_absmax;    // this block's absmax of v, in/out
  void* half_out;     // [n] fp16/bf16 bits or nullptr
  HalfKind half_kind;
  int64_t n;
  const BlockSegment* segments;  // sorted, disjoint, inside [0, n)
  int32_t num_segments;
  QuantTables m_tables, v_tables;
  float* m_scratch;  // [n]
  float* v_scratch;  // [n]
  Adam8bitNext next;
};

void adam8bit_block_scalar(const Adam8bitBlock& a);
void adam8bit_block_avx2(const Adam8bitBlock& a);
void adam8bit_block_avx512(const Adam8bitBlock& a);
// AVX-512 F+BW+VL+VBMI: the AVX-512 build with the map and midpoint look-ups done on byte planes
// (vpermi2b), 64 codes at a time; the same bytes as every other build.
void adam8bit_block_avx512vbmi(const Adam8bitBlock& a);

}  // namespace zt::optim::kernels
