// Portable build of the CpuAdam loop (see cpu_adam_kernel.h): adam_formula.h's unfused update.
#include <cmath>
#include <cstring>

#include "optim/cpu_adam_kernel.h"

namespace zt::optim::kernels {

uint16_t float_to_fp16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520
  if (abs < 0x38800000u) {  // below 2^-14: subnormal half (or zero)
    // Value = abs_float; half subnormal unit is 2^-24. Let the FPU round: f * 2^24 to nearest.
    float a;
    std::memcpy(&a, &abs, 4);
    const float scaled = a * 16777216.0f;  // exact (power of two)
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  // Normal: rebias exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even.
  uint32_t h = abs - 0x38000000u;  // exponent - 112, in place
  h = (h + 0x0fffu + ((h >> 13) & 1u)) >> 13;
  return static_cast<uint16_t>(sign | h);
}

void adam_scalar(const AdamArgs& a) {
  uint16_t* half = static_cast<uint16_t*>(a.half_out);
  for (int64_t i = 0; i < a.n; ++i) {
    float p = a.param[i], m = a.exp_avg[i], v = a.exp_avg_sq[i];
    adam_update<false>(a.c, p, a.grad[i], m, v);
    a.param[i] = p;
    a.exp_avg[i] = m;
    a.exp_avg_sq[i] = v;
    if (a.half_kind == HalfKind::kFloat16) {
      half[i] = float_to_fp16_bits(p);
    } else if (a.half_kind == HalfKind::kBFloat16) {
      uint32_t bits;
      std::memcpy(&bits, &p, 4);
      half[i] = float_to_bf16_bits(bits);
    }
  }
}

}  // namespace zt::optim::kernels
