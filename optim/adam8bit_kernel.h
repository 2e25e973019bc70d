#pragma once
// The CPU pass of Adam8bit over one quantization block, in three builds like CpuAdam's loop
// (cpu_adam_kernel.h): portable scalar, AVX2 and AVX-512 F+BW+VL, each in its own translation
// unit with its own -m flags (optim/CMakeLists.txt). Those files include nothing but this header
// (and through it adam_formula.h, whose inline code they never call) and <immintrin.h>.
//
// One block, four passes over data that stays in L1 (block_size 2048: 16 KiB of scratch):
//   1. decode m and v into fp32 scratch: map[code] * absmax (one rounding);
//   2. for each group segment of the block: adam_formula.h's unfused update (the 8-bit optimizer
//      rounds every multiply and add on its own on every device: adam_formula.h), the parameter
//      and its fp16/bf16 copy written back;
//   3. the new absmax of m (of |m|) and of v; NaN is skipped, as std::max(acc, NaN) keeps acc;
//   4. encode m * (1 / absmax) and v * (1 / absmax) with the block-wise codec (blockwise_quant.h):
//      the code of the top 16 bits' bucket, then up past the midpoints x exceeds. The SIMD builds
//      count those midpoints from per-bucket thresholds (the bucket's next midpoints), so every
//      look-up is indexed by the bucket alone and none waits for another.
// The SIMD builds do each pass with vector loads and gathers and give the scalar build's bytes
// bit for bit (tests/unit/optim/adam8bit_test.cpp): no fused multiply-add anywhere (their files
// compile with -ffp-contract=off), the same per-element operations, and max is exact.

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
};

// Elements [begin, end) of the block (offsets into it) updated with one group's constants.
struct BlockSegment {
  int64_t begin, end;
  AdamConstants c;
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
};

void adam8bit_block_scalar(const Adam8bitBlock& a);
void adam8bit_block_avx2(const Adam8bitBlock& a);
void adam8bit_block_avx512(const Adam8bitBlock& a);

}  // namespace zt::optim::kernels
