#include "optim/clip.h"

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "base/error.h"
#include "optim/cpu_adam.h"
#include "optim/sum_squares_kernel.h"

namespace zt::optim {

namespace {

// The widest build this CPU runs (ZT_CPU_ADAM_SIMD forces one, as for CpuAdam).
double (*sum_squares_kernel())(const float*, int64_t) {
  switch (parse_simd_path("auto")) {
    case SimdPath::kAvx512: return kernels::sum_squares_avx512;
    case SimdPath::kAvx2: return kernels::sum_squares_avx2;
    case SimdPath::kScalar: break;
  }
  return kernels::sum_squares_scalar;
}

}  // namespace

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
  auto kernel = sum_squares_kernel();
  // Fixed chunks, reduced in order: the result does not depend on the thread count (nor, see
  // sum_squares_kernel.h, on the SIMD build).
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (flat.numel() + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks, 0.0);
  // Each thread reads its chunks last to first, so the ones it read last (still in the cache)
  // are the first an optimizer pass over the same range in the same split reads next.
  at::parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = ce - 1; c >= cb; --c) {
      const int64_t b = c * kChunk, e = std::min(flat.numel(), b + kChunk);
      partial[c] = kernel(x + b, e - b);
    }
  });
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace zt::optim
