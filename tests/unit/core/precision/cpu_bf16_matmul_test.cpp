// core/precision/cpu_bf16_matmul.h: on a CPU without bf16 GEMM support, bf16 products are the
// fp32 products rounded once; every other dtype, and every CPU with support, keeps LibTorch's
// kernels bit for bit.
#include "core/precision/cpu_bf16_matmul.h"

#include <ATen/ops/addmm_cpu_dispatch.h>
#include <ATen/ops/baddbmm_cpu_dispatch.h>
#include <ATen/ops/bmm_cpu_dispatch.h>
#include <ATen/ops/mm_cpu_dispatch.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

torch::Tensor bf16(std::vector<int64_t> shape, int seed) {
  torch::manual_seed(seed);
  return torch::randn(shape).to(torch::kBFloat16);
}

// As the replacement widens: contiguous fp32.
torch::Tensor f32(const torch::Tensor& t) {
  return t.to(torch::kFloat, false, false, torch::MemoryFormat::Contiguous);
}

void expect_bitwise(const torch::Tensor& got, const torch::Tensor& want) {
  ASSERT_EQ(got.scalar_type(), want.scalar_type());
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_TRUE(torch::equal(got, want)) << "max |diff| " << (f32(got) - f32(want)).abs().max();
}

TEST(CpuBf16Matmul, TakenExactlyWhenTheCpuLacksBf16Gemm) {
  EXPECT_EQ(zt::cpu_bf16_matmul_through_fp32(), !zt::cpu_has_native_bf16_matmul());
}

// What each form must return: the fp32 product rounded once where the kernels are replaced,
// LibTorch's own bf16 kernel elsewhere.
torch::Tensor expected(const torch::Tensor& fp32_product, const torch::Tensor& torch_bf16) {
  return zt::cpu_bf16_matmul_through_fp32() ? fp32_product.to(torch::kBFloat16) : torch_bf16;
}

TEST(CpuBf16Matmul, EveryFormIsTheRoundedFp32Product) {
  auto a = bf16({37, 64}, 1), b = bf16({64, 29}, 2), bias = bf16({29}, 3), c = bf16({37, 29}, 4);
  expect_bitwise(torch::mm(a, b), expected(at::cpu::mm(f32(a), f32(b)), at::cpu::mm(a, b)));
  auto out = torch::empty({0}, torch::kBFloat16);
  torch::mm_out(out, a, b);
  expect_bitwise(out, expected(at::cpu::mm(f32(a), f32(b)), at::cpu::mm(a, b)));

  auto want_addmm =
      expected(at::cpu::addmm(f32(c), f32(a), f32(b), 0.5, 2.0), at::cpu::addmm(c, a, b, 0.5, 2.0));
  expect_bitwise(torch::addmm(c, a, b, 0.5, 2.0), want_addmm);
  auto out2 = torch::empty({37, 29}, torch::kBFloat16);
  torch::addmm_out(out2, c, a, b, 0.5, 2.0);
  expect_bitwise(out2, want_addmm);
  auto inplace = c.clone();
  inplace.addmm_(a, b, 0.5, 2.0);
  expect_bitwise(inplace, want_addmm);
  // nn::Linear's forward: addmm with a broadcast bias.
  expect_bitwise(torch::nn::functional::linear(a, b.t(), bias),
                 expected(at::cpu::addmm(f32(bias), f32(a), f32(b)), at::cpu::addmm(bias, a, b)));

  auto x = bf16({3, 11, 16}, 5), y = bf16({3, 16, 7}, 6), z = bf16({3, 11, 7}, 7);
  expect_bitwise(torch::bmm(x, y), expected(at::cpu::bmm(f32(x), f32(y)), at::cpu::bmm(x, y)));
  auto want_baddbmm = expected(at::cpu::baddbmm(f32(z), f32(x), f32(y), 1.0, 0.25),
                               at::cpu::baddbmm(z, x, y, 1.0, 0.25));
  expect_bitwise(torch::baddbmm(z, x, y, 1.0, 0.25), want_baddbmm);
  auto bout = torch::empty({0}, torch::kBFloat16);
  torch::baddbmm_out(bout, z, x, y, 1.0, 0.25);
  expect_bitwise(bout, want_baddbmm);
  auto binplace = z.clone();
  binplace.baddbmm_(x, y, 1.0, 0.25);
  expect_bitwise(binplace, want_baddbmm);
}

TEST(CpuBf16Matmul, AgreesWithLibTorchsBf16KernelToItsRounding) {
  // Both sum the products in fp32 and round once; only the order of the sums differs, so the
  // two agree to a bf16 ulp of the result, relative to the row's magnitude.
  auto a = bf16({64, 256}, 8), b = bf16({256, 48}, 9);
  auto ours = f32(torch::mm(a, b)), theirs = f32(at::cpu::mm(a, b));
  auto scale = f32(torch::mm(a.abs(), b.abs()));
  EXPECT_LE(((ours - theirs).abs() / scale).max().item<float>(), 1.0f / 128);
  EXPECT_GT((ours == theirs).to(torch::kFloat).mean().item<float>(), 0.9f);
}

TEST(CpuBf16Matmul, OtherDtypesKeepLibTorchsKernels) {
  torch::manual_seed(10);
  auto a = torch::randn({33, 20}), b = torch::randn({20, 17}), c = torch::randn({33, 17});
  expect_bitwise(torch::mm(a, b), at::cpu::mm(a, b));
  expect_bitwise(torch::addmm(c, a, b), at::cpu::addmm(c, a, b));
  auto ad = a.to(torch::kDouble), bd = b.to(torch::kDouble);
  expect_bitwise(torch::mm(ad, bd), at::cpu::mm(ad, bd));
  auto ah = a.to(torch::kHalf), bh = b.to(torch::kHalf);
  expect_bitwise(torch::mm(ah, bh), at::cpu::mm(ah, bh));
  // A bf16 bias on fp32 operands (or any other mix) is LibTorch's to refuse or accept.
  auto bias = torch::randn({17}).to(torch::kBFloat16);
  EXPECT_THROW(torch::addmm(bias, a, b.to(torch::kBFloat16)), c10::Error);
  EXPECT_THROW(torch::mm(a, b.to(torch::kBFloat16)), c10::Error);
}

TEST(CpuBf16Matmul, GradientsFlowThroughTheReplacedKernels) {
  // Autograd sits above the CPU kernels: a bf16 Linear's gradients are the same products,
  // each the rounded fp32 product.
  auto x = bf16({8, 12}, 11).requires_grad_(), w = bf16({5, 12}, 12).requires_grad_();
  auto g = bf16({8, 5}, 13);
  torch::nn::functional::linear(x, w).backward(g);
  expect_bitwise(x.grad(), expected(at::cpu::mm(f32(g), f32(w)), at::cpu::mm(g, w)));
  expect_bitwise(
      w.grad(), expected(at::cpu::mm(f32(g.t()), f32(x.detach())), at::cpu::mm(g.t(), x.detach())));
}

TEST(CpuBf16Matmul, AProductRoundsTheSameWhateverTheOperandsStrides) {
  // A transposed view and its contiguous copy hold the same matrix: the product is the same bits
  // (the test device runs CPU kernels on contiguous copies of device tensors). LibTorch's own
  // kernels promise no such thing.
  if (!zt::cpu_bf16_matmul_through_fp32()) GTEST_SKIP() << "this CPU keeps LibTorch's kernels";
  auto a = bf16({40, 96}, 14), b = bf16({96, 24}, 15);
  auto a_view = a.t().contiguous().t(), b_view = b.t().contiguous().t();
  ASSERT_FALSE(a_view.is_contiguous());
  expect_bitwise(torch::mm(a_view, b_view), torch::mm(a, b));
  auto x = bf16({2, 96, 40}, 16).transpose(1, 2), y = bf16({2, 96, 24}, 17);
  expect_bitwise(torch::bmm(x, y), torch::bmm(x.contiguous(), y));
}

}  // namespace
