#include "core/zero/block_quant.h"

#include <ATen/ATen.h>

#include "base/error.h"

namespace zt::zero {

namespace {

constexpr int64_t kTargetBlock = 8000;  // DeepSpeed's target group size
constexpr int64_t kMinBlock = 1024;     // below this the scales' bytes start to matter

}  // namespace

QuantBlocks quant_blocks(int64_t n) {
  ZT_INTERNAL_ASSERT(n > 0, "quantizing an empty shard");
  QuantBlocks qb;
  qb.numel = n;
  int64_t groups = (n + kTargetBlock - 1) / kTargetBlock;
  if (n % 8 == 0) {
    while (groups < n && n % (8 * groups) != 0) ++groups;
    while (n % (16 * groups) == 0 && n / groups > kTargetBlock) groups *= 2;
  }
  if (n % 8 != 0 || n / groups < std::min(kMinBlock, n)) {
    groups = (n + kTargetBlock - 1) / kTargetBlock;
  }
  qb.blocks = groups;
  qb.block = (n + groups - 1) / groups;
  return qb;
}

void quantize_blocks(const at::Tensor& src, const QuantBlocks& qb, at::Tensor* q,
                     at::Tensor* scales, int64_t parts) {
  at::Tensor x = src.to(at::kFloat).view({parts, qb.numel});
  const int64_t padded = qb.blocks * qb.block;
  if (padded != qb.numel) x = at::constant_pad_nd(x, {0, padded - qb.numel});
  x = x.reshape({parts * qb.blocks, qb.block});
  at::Tensor s = x.abs().amax({1}, /*keepdim=*/true).div_(127.0f);
  // An all-zero block has scale 0: divide by 1 instead (q = 0 either way).
  at::Tensor safe = at::where(s > 0, s, at::ones_like(s));
  *q = x.div(safe).round_().clamp_(-127, 127).to(at::kChar).view({parts * padded});
  *scales = s.view({parts * qb.blocks});
}

void dequantize_blocks(const at::Tensor& q, const at::Tensor& scales, const QuantBlocks& qb,
                       int64_t parts, at::Tensor& out) {
  const at::Tensor values =
      q.view({parts, qb.blocks, qb.block}).to(at::kFloat).mul_(scales.view({parts, qb.blocks, 1}));
  out.view({parts, qb.numel})
      .copy_(values.view({parts, qb.blocks * qb.block}).narrow(1, 0, qb.numel));
}

}  // namespace zt::zero
