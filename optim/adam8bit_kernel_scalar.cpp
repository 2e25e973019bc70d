// Portable build of Adam8bit's block pass (adam8bit_kernel.h): the reference the SIMD builds
// match bit for bit.
#include <algorithm>
#include <cmath>

#include "optim/adam8bit_kernel.h"

namespace zt::optim::kernels {

namespace {

uint8_t encode(const QuantTables& t, float x) {
  uint32_t bits;
  __builtin_memcpy(&bits, &x, 4);
  int code = t.bucket_code[bits >> 16];
  while (code < 255 && t.mid[code] < x) ++code;
  return static_cast<uint8_t>(code);
}

}  // namespace

void adam8bit_block_scalar(const Adam8bitBlock& a) {
  float* m = a.m_scratch;
  float* v = a.v_scratch;
  const float ma = *a.m_absmax, va = *a.v_absmax;
  for (int64_t k = 0; k < a.n; ++k) {
    m[k] = a.m_tables.map[a.m_code[k]] * ma;
    v[k] = a.v_tables.map[a.v_code[k]] * va;
  }
  uint16_t* half = static_cast<uint16_t*>(a.half_out);
  for (int32_t s = 0; s < a.num_segments; ++s) {
    const BlockSegment& seg = a.segments[s];
    for (int64_t k = seg.begin; k < seg.end; ++k) {
      adam_update<false>(seg.c, a.param[k], a.grad[k], m[k], v[k]);
      if (a.half_kind == HalfKind::kFloat16) {
        half[k] = float_to_fp16_bits(a.param[k]);
      } else if (a.half_kind == HalfKind::kBFloat16) {
        uint32_t bits;
        __builtin_memcpy(&bits, &a.param[k], 4);
        half[k] = float_to_bf16_bits(bits);
      }
    }
  }
  float mmax = 0, vmax = 0;
  for (int64_t k = 0; k < a.n; ++k) {
    mmax = std::max(mmax, std::fabs(m[k]));
    vmax = std::max(vmax, v[k]);
  }
  *a.m_absmax = mmax;
  *a.v_absmax = vmax;
  const float mi = mmax > 0 ? 1 / mmax : 0, vi = vmax > 0 ? 1 / vmax : 0;
  for (int64_t k = 0; k < a.n; ++k) {
    a.m_code[k] = encode(a.m_tables, m[k] * mi);
    a.v_code[k] = encode(a.v_tables, v[k] * vi);
  }
}

}  // namespace zt::optim::kernels
