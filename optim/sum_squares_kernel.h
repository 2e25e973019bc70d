#pragma once
// The inner loop of optim::sum_of_squares (optim/clip.h): sum of x[i]^2 over a contiguous fp32
// range, accumulated in float64. Three builds of one summation order, each in its own translation
// unit with its own -m flags (optim/CMakeLists.txt), like CpuAdam's kernels:
//
//   16 accumulators: lane k takes x[16 j + k] of every full block of 16, in order of j; then the
//   lanes are added in order 0..15, then the tail elements in order.
//
// The square of a float is exact in double (48 significant bits), so a fused multiply-add rounds
// acc + x*x exactly as an add of the product does: the scalar, AVX2 and AVX-512 builds return the
// same bits (tests/unit/optim/clip_test.cpp), whatever the machine picks.

#include <cstdint>

namespace zt::optim::kernels {

double sum_squares_scalar(const float* x, int64_t n);
double sum_squares_avx2(const float* x, int64_t n);
double sum_squares_avx512(const float* x, int64_t n);

}  // namespace zt::optim::kernels
