#include "core/precision/overflow_check.h"

#include <atomic>

#include <ATen/Parallel.h>
#include <ATen/ops/zeros.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "core/base/error.h"
#include "core/cuda_plugin.h"

namespace zt {
namespace {

// x - x is 0 for every finite x and NaN for inf and NaN; the comparison keeps the loop free of
// branches so it vectorises.
template <typename T>
bool check_and_unscale_cpu(T* data, int64_t n, float inv_scale) {
  std::atomic<bool> bad{false};
  const bool scale = inv_scale != 1.0f;
  at::parallel_for(0, n, 1 << 16, [&](int64_t begin, int64_t end) {
    bool local_bad = false;
    for (int64_t i = begin; i < end; ++i) {
      float v = static_cast<float>(data[i]);
      local_bad |= !((v - v) == 0.0f);
      if (scale) data[i] = static_cast<T>(v * inv_scale);
    }
    if (local_bad) bad.store(true, std::memory_order_relaxed);
  });
  return bad.load();
}

void check_and_unscale_cuda(at::Tensor& t, float inv_scale, at::Tensor& found_inf) {
  const auto& k = cuda::require_kernels("check_and_unscale_ on a CUDA tensor");
  cuda::ScalarKind kind;
  switch (t.scalar_type()) {
    case at::kFloat: kind = cuda::ScalarKind::kFloat32; break;
    case at::kHalf: kind = cuda::ScalarKind::kFloat16; break;
    case at::kBFloat16: kind = cuda::ScalarKind::kBFloat16; break;
    default: ZT_THROW("check_and_unscale_: unsupported dtype ", t.scalar_type());
  }
  int32_t err = k.check_and_unscale(t.data_ptr(), t.numel(), kind, inv_scale,
                                    found_inf.data_ptr<int32_t>(), /*stream=current*/ nullptr);
  ZT_CHECK(err == 0, "check_and_unscale_ CUDA kernel failed: ", k.error_string(err));
}

}  // namespace

bool check_and_unscale_(at::Tensor& t, float inv_scale) {
  ZT_CHECK(t.is_contiguous(), "check_and_unscale_ needs a contiguous tensor");
  if (t.numel() == 0) return false;
  if (t.is_cuda()) {
    at::Tensor flag = at::zeros({1}, t.options().dtype(at::kInt));
    check_and_unscale_cuda(t, inv_scale, flag);
    return flag.item<int32_t>() != 0;
  }
  switch (t.scalar_type()) {
    case at::kFloat: return check_and_unscale_cpu(t.data_ptr<float>(), t.numel(), inv_scale);
    case at::kHalf: return check_and_unscale_cpu(t.data_ptr<at::Half>(), t.numel(), inv_scale);
    case at::kBFloat16:
      return check_and_unscale_cpu(t.data_ptr<at::BFloat16>(), t.numel(), inv_scale);
    default: ZT_THROW("check_and_unscale_: unsupported dtype ", t.scalar_type());
  }
}

void check_and_unscale_into_(at::Tensor& t, float inv_scale, at::Tensor& found_inf) {
  ZT_CHECK(found_inf.defined() && found_inf.scalar_type() == at::kInt && found_inf.numel() == 1 &&
               found_inf.device() == t.device(),
           "check_and_unscale_into_: found_inf must be int32 [1] on ", t.device());
  ZT_CHECK(t.is_contiguous(), "check_and_unscale_ needs a contiguous tensor");
  if (t.numel() == 0) return;
  if (t.is_cuda()) {
    check_and_unscale_cuda(t, inv_scale, found_inf);
  } else if (check_and_unscale_(t, inv_scale)) {
    found_inf.fill_(1);
  }
}

}  // namespace zt
