#include "optim/clip.h"

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "core/base/error.h"

namespace zt::optim {

double clip_coefficient(double global_norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  const double coef = max_norm / (global_norm + 1e-6);
  return coef < 1.0 || std::isnan(coef) ? coef : 1.0;
}

double sum_of_squares(const at::Tensor& flat) {
  ZT_CHECK(flat.defined() && at::isFloatingType(flat.scalar_type()),
           "sum_of_squares needs a floating-point tensor, got ",
           flat.defined() ? flat.toString() : "undefined");
  if (flat.numel() == 0) return 0.0;
  if (!flat.is_cpu() || flat.scalar_type() != at::kFloat || !flat.is_contiguous()) {
    return flat.to(at::kDouble).square().sum().item<double>();
  }
  const float* x = flat.data_ptr<float>();
  // Fixed chunks, reduced in order: the result does not depend on the thread count.
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (flat.numel() + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks, 0.0);
  at::parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      const int64_t b = c * kChunk, e = std::min(flat.numel(), b + kChunk);
      // Eight fp64 lanes the compiler can vectorise.
      double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t i = b;
      for (; i + 8 <= e; i += 8) {
        for (int k = 0; k < 8; ++k) acc[k] += static_cast<double>(x[i + k]) * x[i + k];
      }
      double s = 0;
      for (; i < e; ++i) s += static_cast<double>(x[i]) * x[i];
      for (double a : acc) s += a;
      partial[c] = s;
    }
  });
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace zt::optim
