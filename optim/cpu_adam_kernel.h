#pragma once
// The inner loop of CpuAdam: one pass over a contiguous range that reads param, grad, m, v and
// writes param, m, v and (optionally) the fp16/bf16 copy of param. Three builds of the same loop:
// portable scalar, AVX2+FMA+F16C and AVX-512 F+BW+VL, each in its own translation unit compiled
// with its own -m flags (optim/CMakeLists.txt). Those files include nothing but this header (and
// through it adam_formula.h, whose inline code they never call) and <immintrin.h>, so no inline
// function of a shared header is ever compiled with wider ISA flags (the linker could otherwise
// pick that copy for every caller).
//
// The arithmetic is adam_formula.h's: the scalar build is adam_update<false> (unfused), the AVX2
// and AVX-512 builds are adam_update<true> (fused multiply-adds) in intrinsics, tails included,
// each bit for bit (tests/unit/optim/adam_formula_test.cpp).

#include <cstdint>

#include "optim/adam_formula.h"

namespace zt::optim::kernels {

enum class HalfKind : int32_t { kNone = 0, kFloat16 = 1, kBFloat16 = 2 };

struct AdamArgs {
  float* param;       // [n] fp32, updated in place
  const float* grad;  // [n] fp32
  float* exp_avg;     // [n] fp32 m, updated in place
  float* exp_avg_sq;  // [n] fp32 v, updated in place
  void* half_out;     // [n] fp16 or bf16 bits, or nullptr
  HalfKind half_kind;
  int64_t n;
  AdamConstants c;  // adam_constants() of the group and step
};

// Per element: adam_formula.h's update, then half = round_nearest_even(p).
void adam_scalar(const AdamArgs& a);
void adam_avx2(const AdamArgs& a);
void adam_avx512(const AdamArgs& a);

// IEEE fp32 -> fp16 bits, round to nearest even, with subnormals and overflow to inf; NaN becomes
// 0x7e00 with its sign (what c10::Half gives). Defined in the scalar build.
uint16_t float_to_fp16_bits(float f);

// Round-to-nearest-even fp32 -> bf16 bits; NaN stays a quiet NaN.
inline uint16_t float_to_bf16_bits(uint32_t bits) {
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace zt::optim::kernels
