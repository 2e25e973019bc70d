#include "optim/blockwise_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <ATen/Parallel.h>

#include "base/error.h"

namespace zt::optim {
namespace {

QuantMap build_dynamic_map(bool is_signed) {
  constexpr int kExponents = 7;  // decades 10^0 .. 10^-6
  std::vector<double> v;
  for (int i = 0; i < kExponents; ++i) {
    // i = 6 is the top decade [0.1, 1]; it gets the most fraction bits.
    const int parts = is_signed ? (1 << i) : (1 << (i + 1));
    const double scale = std::pow(10.0, -(kExponents - 1) + i);
    for (int k = 0; k < parts; ++k) {
      const double lo = 0.1 + 0.9 * k / parts, hi = 0.1 + 0.9 * (k + 1) / parts;
      v.push_back(scale * (lo + hi) / 2);
      if (is_signed) v.push_back(-scale * (lo + hi) / 2);
    }
  }
  v.push_back(0.0);
  v.push_back(1.0);
  ZT_INTERNAL_ASSERT(v.size() == 256, "dynamic map has ", v.size(), " values");
  std::sort(v.begin(), v.end());
  QuantMap m;
  for (int i = 0; i < 256; ++i) m[i] = static_cast<float>(v[i]);
  return m;
}

}  // namespace

const QuantMap& dynamic_map(bool is_signed) {
  static const QuantMap kSigned = build_dynamic_map(true);
  static const QuantMap kUnsigned = build_dynamic_map(false);
  return is_signed ? kSigned : kUnsigned;
}

QuantCodec::QuantCodec(const QuantMap& map) : map_(map) {
  for (int i = 0; i < 255; ++i) mid_[i] = 0.5f * (map_[i] + map_[i + 1]);
  mid_[255] = std::numeric_limits<float>::infinity();
  for (uint32_t h = 0; h < 65536; ++h) {
    // The bucket's floats share the top 16 bits; its smallest value is the low end for positive
    // numbers and the high-magnitude end for negative ones.
    const uint32_t lo_bits = (h & 0x8000u) ? (h << 16) | 0xffffu : (h << 16);
    float lo;
    std::memcpy(&lo, &lo_bits, 4);
    table_[h] = std::isnan(lo) ? 0 : encode_by_bisection(lo);
  }
  table_[65536] = table_[65537] = table_[65538] = 0;
  // encode() is monotone in x, so a bucket's most steps are those of its largest non-NaN value:
  // the high end for positive buckets, the low-magnitude end for negative ones.
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t hi_bits = (h & 0x8000u) ? (h << 16) : (h << 16) | 0xffffu;
    float hi;
    std::memcpy(&hi, &hi_bits, 4);
    if (std::isnan(hi)) continue;
    max_steps_ = std::max(max_steps_, encode_by_bisection(hi) - int32_t{table_[h]});
  }
  thresholds_.resize(static_cast<size_t>(max_steps_) * 65536);
  for (int32_t j = 0; j < max_steps_; ++j) {
    for (uint32_t h = 0; h < 65536; ++h) {
      const int code = table_[h] + j;
      thresholds_[static_cast<size_t>(j) * 65536 + h] =
          code < 255 ? mid_[code] : std::numeric_limits<float>::infinity();
    }
  }
  if (max_steps_ == 1) {
    bucket_step_.resize(65536);
    for (uint32_t h = 0; h < 65536; ++h) {
      const int code = table_[h];
      uint32_t threshold = 0xffff;
      if (code < 255) {
        uint32_t mid_bits;
        std::memcpy(&mid_bits, &mid_[code], 4);
        if (mid_bits >> 16 == h)
          threshold = (h & 0x8000u) ? ~mid_bits & 0xffffu : mid_bits & 0xffffu;
      }
      bucket_step_[h] = static_cast<uint32_t>(code) | threshold << 16;
    }
  }
  for (int i = 0; i < 256; ++i) {
    uint32_t map_bits, mid_bits;
    std::memcpy(&map_bits, &map_[i], 4);
    std::memcpy(&mid_bits, &mid_[i], 4);
    for (int p = 0; p < 4; ++p) {
      map_planes_[256 * p + i] = static_cast<uint8_t>(map_bits >> (8 * p));
      mid_planes_[256 * p + i] = static_cast<uint8_t>(mid_bits >> (8 * p));
    }
  }
}

kernels::QuantTables QuantCodec::tables() const {
  return {map_.data(),        mid_.data(),
          table_.data(),      max_steps_,
          thresholds_.data(), bucket_step_.empty() ? nullptr : bucket_step_.data(),
          map_planes_.data(), mid_planes_.data()};
}

uint8_t QuantCodec::encode_by_bisection(float x) const {
  // Branch-light bisection over the 255 midpoints: the code is the number of midpoints < x.
  int lo = 0;
  for (int step = 128; step > 0; step >>= 1) {
    const int probe = lo + step - 1;
    if (probe < 255 && mid_[probe] < x) lo += step;
  }
  return static_cast<uint8_t>(lo);
}

void quantize_blockwise(const float* x, int64_t n, int64_t block, const QuantCodec& codec,
                        uint8_t* codes, float* absmax) {
  const int64_t blocks = (n + block - 1) / block;
  at::parallel_for(0, blocks, 1, [&](int64_t bb, int64_t be) {
    for (int64_t b = bb; b < be; ++b) {
      const int64_t lo = b * block, hi = std::min(n, lo + block);
      float amax = 0;
      for (int64_t i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(x[i]));
      absmax[b] = amax;
      const float inv = amax > 0 ? 1.0f / amax : 0.0f;
      for (int64_t i = lo; i < hi; ++i) codes[i] = codec.encode(x[i] * inv);
    }
  });
}

void dequantize_blockwise(const uint8_t* codes, const float* absmax, int64_t n, int64_t block,
                          const QuantCodec& codec, float* out) {
  at::parallel_for(0, n, block, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = codec.decode(codes[i]) * absmax[i / block];
  });
}

}  // namespace zt::optim
