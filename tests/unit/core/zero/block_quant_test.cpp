// ZeRO++ qwZ's int8 blocks (core/zero/block_quant.h): the block counts DeepSpeed's CUDAQuantizer
// picks (the table below was computed with its rule from deepspeed/runtime/zero/
// partition_parameters.py, DeepSpeed 0.19.8) and the fallback where that rule makes tiny blocks,
// the error bound |x - x'| <= max|x| / 254 per block, and exact zeros and block maxima. Quantizing
// the fp32 rebuilt values again gives the same blocks and scales, which is what lets a checkpoint
// of quantized frozen weights resume bit for bit.
#include "core/zero/block_quant.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace zt::zero {
namespace {

TEST(BlockQuant, BlockCountsFollowDeepSpeedsRule) {
  const std::pair<int64_t, int64_t> deepspeed[] = {
      {8, 1},      {64, 1},        {8000, 1},      {16000, 2},  {24000, 3},
      {65536, 16}, {1048576, 256}, {1000008, 129}, {98760, 15}, {56056, 11}};
  for (auto [n, groups] : deepspeed) {
    const QuantBlocks qb = quant_blocks(n);
    EXPECT_EQ(qb.blocks, groups) << n;
    EXPECT_EQ(qb.blocks * qb.block, n) << n;
  }
  // DeepSpeed's rule would give 10007 blocks of 8 (80056 = 8 x 10007, a prime) and asserts on a
  // size that is not a multiple of 8: ceil(n / 8000) blocks, the last padded.
  for (auto [n, groups] : {std::pair<int64_t, int64_t>{80056, 11}, {1001, 1}, {16001, 3}}) {
    const QuantBlocks qb = quant_blocks(n);
    EXPECT_EQ(qb.blocks, groups) << n;
    EXPECT_GE(qb.blocks * qb.block, n) << n;
    EXPECT_LT((qb.blocks - 1) * qb.block, n) << n;
  }
}

TEST(BlockQuant, RebuildsWithinHalfAStepOfEveryBlock) {
  torch::manual_seed(3);
  for (int64_t n : {1001, 16000, 80056}) {
    for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
      const int64_t parts = 3;
      torch::Tensor full = torch::randn({parts * n}) * torch::rand({parts * n}).pow(4) * 5;
      full.narrow(0, 0, 50).zero_();  // an all-zero stretch
      full = full.to(dtype);
      const QuantBlocks qb = quant_blocks(n);
      std::vector<torch::Tensor> qs, ss;
      for (int64_t p = 0; p < parts; ++p) {
        at::Tensor q, s;
        quantize_blocks(full.narrow(0, p * n, n), qb, &q, &s);
        ASSERT_EQ(q.scalar_type(), torch::kChar);
        ASSERT_EQ(q.numel(), qb.blocks * qb.block);
        ASSERT_EQ(s.numel(), qb.blocks);
        qs.push_back(q);
        ss.push_back(s);
      }
      at::Tensor out = torch::empty({parts * n}, dtype);
      dequantize_blocks(torch::cat(qs), torch::cat(ss), qb, parts, out);
      const torch::Tensor x = full.to(torch::kFloat), y = out.to(torch::kFloat);
      // Per block: half a quantization step, plus the output dtype's rounding of the result.
      const double ulp = dtype == torch::kFloat ? 1e-6 : 1.0 / 128;
      for (int64_t p = 0; p < parts; ++p) {
        for (int64_t b = 0; b < qb.blocks; ++b) {
          const int64_t begin = b * qb.block, len = std::min(qb.block, n - begin);
          const torch::Tensor xb = x.narrow(0, p * n + begin, len);
          const torch::Tensor yb = y.narrow(0, p * n + begin, len);
          const double absmax = xb.abs().max().item<double>();
          const double err = (xb - yb).abs().max().item<double>();
          EXPECT_LE(err, absmax / 254 * (1 + 1e-5) + absmax * ulp) << n << " part " << p;
        }
      }
      EXPECT_TRUE(torch::equal(y.narrow(0, 0, 50), torch::zeros({50})));
      // The largest magnitude of a block is one of its 127 steps: rebuilt to its rounding.
      const int64_t at = x.abs().argmax().item<int64_t>();
      EXPECT_NEAR(y[at].item<double>(), x[at].item<double>(),
                  std::abs(x[at].item<double>()) * (1e-6 + ulp));
      EXPECT_GT((x - y).abs().max().item<double>(), 0) << "nothing was quantized";
    }
  }
}

TEST(BlockQuant, QuantizesItsOwnRebuiltValuesIdentically) {
  torch::manual_seed(11);
  // Magnitudes over many binades, so the scales take every rounding case of 127 s / 127.
  const int64_t n = 1 << 20;
  const torch::Tensor x = torch::randn({n}) * torch::pow(10.0, torch::empty({n}).uniform_(-6, 4));
  for (int64_t block : {64, 1000}) {
    const QuantBlocks qb{n, (n + block - 1) / block, block};
    at::Tensor q, s;
    quantize_blocks(x, qb, &q, &s);
    at::Tensor rebuilt = torch::empty({n});
    dequantize_blocks(q, s, qb, 1, rebuilt);
    at::Tensor q2, s2;
    quantize_blocks(rebuilt, qb, &q2, &s2);
    EXPECT_TRUE(torch::equal(s2, s)) << (s2 != s).sum().item<int64_t>() << " scales moved";
    EXPECT_TRUE(torch::equal(q2, q)) << (q2 != q).sum().item<int64_t>() << " values moved";
  }
}

}  // namespace
}  // namespace zt::zero
