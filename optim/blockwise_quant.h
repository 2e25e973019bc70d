#pragma once
// Block-wise dynamic 8-bit quantization (Dettmers et al., "8-bit Optimizers via Block-wise
// Quantization", 2022). A tensor is cut into blocks of B elements; each block stores its absmax
// (fp32) and one byte per element: the index of the nearest value of a fixed 256-entry map after
// dividing by absmax, so every value in [-absmax, absmax] is representable.
//
// The dynamic map (the paper's "dynamic tree" values, as bitsandbytes' create_dynamic_map with 7
// exponent bits): for each decade e = 0..6 the magnitudes 10^-e * midpoints of an even split of
// [0.1, 1] into 2^(6-e) parts (signed map: both signs) or 2^(7-e) parts (unsigned map: the sign
// bit buys one more fraction bit), plus 0 and 1. Relative precision is near-constant over six
// decades, which is what Adam's second moment needs. Maps are sorted, so code order is value
// order.

#include <array>
#include <cstdint>
#include <vector>

#include "optim/adam8bit_kernel.h"

namespace zt::optim {

using QuantMap = std::array<float, 256>;

// The signed map (for Adam's m) or the unsigned one (for v, which is >= 0).
const QuantMap& dynamic_map(bool is_signed);

// Nearest-value encoder for one map. encode() looks the top 16 bits of x up in a 64 Ki table
// holding the code of the smallest float with those bits, then steps up past the midpoints that x
// exceeds (0-2 steps: a 16-bit bucket is 2^-7 wide relatively, about one map gap at most), so it
// costs one table load and a compare or two; encode_by_bisection() is the 8-compare reference.
class QuantCodec {
 public:
  explicit QuantCodec(const QuantMap& map);
  // Code of the map value nearest to x (x already divided by the block's absmax).
  uint8_t encode(float x) const {
    uint32_t bits;
    __builtin_memcpy(&bits, &x, 4);
    int code = table_[bits >> 16];
    while (code < 255 && mid_[code] < x) ++code;
    return static_cast<uint8_t>(code);
  }
  uint8_t encode_by_bisection(float x) const;
  float decode(uint8_t code) const { return map_[code]; }
  const QuantMap& map() const { return map_; }
  // The tables as the SIMD kernels read them (adam8bit_kernel.h).
  kernels::QuantTables tables() const;
  // The most midpoints any non-NaN x lies above its bucket's code (encode's loop count at most).
  int32_t max_steps() const { return max_steps_; }

 private:
  QuantMap map_;
  // mid_[i] = (map[i] + map[i + 1]) / 2 for i < 255; mid_[255] = +inf (never below any x), so
  // a 256-entry look-up by code needs no bound check.
  std::array<float, 256> mid_;
  // Top 16 bits of x -> code of the bucket's smallest value; 3 bytes of padding after the 65536
  // entries, so a 4-byte gather at the last entry stays inside.
  std::array<uint8_t, 65536 + 3> table_;
  int32_t max_steps_ = 0;
  std::vector<float> thresholds_;      // kernels::QuantTables::bucket_thresholds
  std::vector<uint32_t> bucket_step_;  // kernels::QuantTables::bucket_step (max_steps_ == 1)
  // kernels::QuantTables::map_planes and mid_planes: [4][256] bytes each.
  std::array<uint8_t, 1024> map_planes_, mid_planes_;
};

// Quantizes x[0, n) block by block into codes[0, n) and absmax[0, ceil(n / block)).
void quantize_blockwise(const float* x, int64_t n, int64_t block, const QuantCodec& codec,
                        uint8_t* codes, float* absmax);
void dequantize_blockwise(const uint8_t* codes, const float* absmax, int64_t n, int64_t block,
                          const QuantCodec& codec, float* out);

}  // namespace zt::optim
