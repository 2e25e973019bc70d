#include "core/precision/cpu_bf16_matmul.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <ATen/ATen.h>
#include <ATen/ops/addmm_cpu_dispatch.h>
#include <ATen/ops/baddbmm_cpu_dispatch.h>
#include <ATen/ops/bmm_cpu_dispatch.h>
#include <ATen/ops/mm_cpu_dispatch.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "base/env_vars.h"

namespace zt {
namespace {

// Both operands bf16 (the only case LibTorch sends to its scalar loop); mixed dtypes go to
// LibTorch, which refuses them with its own message.
bool widen(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == at::kBFloat16 && b.scalar_type() == at::kBFloat16;
}

// Contiguous, whatever the operand's strides: the fp32 GEMM's summation order depends on its
// operands' layout, and the same product must round the same way whether it comes from a
// transposed view (autograd's weight gradient) or from a contiguous copy of it (a device that
// runs CPU kernels on copies, the test device).
at::Tensor f32(const at::Tensor& t) {
  return t.to(at::kFloat, /*non_blocking=*/false, /*copy=*/false, at::MemoryFormat::Contiguous);
}

// Writes a product computed in fp32 into a caller's output, as LibTorch's out= kernels do:
// resized to the product's shape, then one rounding into its dtype.
at::Tensor& assign(at::Tensor& out, const at::Tensor& product) {
  if (!out.sizes().equals(product.sizes())) out.resize_(product.sizes());
  out.copy_(product);
  return out;
}

at::Tensor mm(const at::Tensor& a, const at::Tensor& b) {
  if (!widen(a, b)) return at::cpu::mm(a, b);
  return at::cpu::mm(f32(a), f32(b)).to(at::kBFloat16);
}

at::Tensor& mm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  if (!widen(a, b) || out.scalar_type() != at::kBFloat16) return at::cpu::mm_outf(a, b, out);
  return assign(out, at::cpu::mm(f32(a), f32(b)));
}

// addmm and baddbmm: `self` joins the widened sum when it is bf16 too (a bias); LibTorch gets
// every other mix.
bool widen3(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b) {
  return widen(a, b) && self.scalar_type() == at::kBFloat16;
}

at::Tensor addmm(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b,
                 const at::Scalar& beta, const at::Scalar& alpha) {
  if (!widen3(self, a, b)) return at::cpu::addmm(self, a, b, beta, alpha);
  return at::cpu::addmm(f32(self), f32(a), f32(b), beta, alpha).to(at::kBFloat16);
}

at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b,
                      const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  if (!widen3(self, a, b) || out.scalar_type() != at::kBFloat16)
    return at::cpu::addmm_outf(self, a, b, beta, alpha, out);
  return assign(out, at::cpu::addmm(f32(self), f32(a), f32(b), beta, alpha));
}

at::Tensor& addmm_(at::Tensor& self, const at::Tensor& a, const at::Tensor& b,
                   const at::Scalar& beta, const at::Scalar& alpha) {
  if (!widen3(self, a, b)) return at::cpu::addmm_(self, a, b, beta, alpha);
  return assign(self, at::cpu::addmm(f32(self), f32(a), f32(b), beta, alpha));
}

at::Tensor bmm(const at::Tensor& a, const at::Tensor& b) {
  if (!widen(a, b)) return at::cpu::bmm(a, b);
  return at::cpu::bmm(f32(a), f32(b)).to(at::kBFloat16);
}

at::Tensor& bmm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  if (!widen(a, b) || out.scalar_type() != at::kBFloat16) return at::cpu::bmm_outf(a, b, out);
  return assign(out, at::cpu::bmm(f32(a), f32(b)));
}

at::Tensor baddbmm(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b,
                   const at::Scalar& beta, const at::Scalar& alpha) {
  if (!widen3(self, a, b)) return at::cpu::baddbmm(self, a, b, beta, alpha);
  return at::cpu::baddbmm(f32(self), f32(a), f32(b), beta, alpha).to(at::kBFloat16);
}

at::Tensor& baddbmm_out(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b,
                        const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  if (!widen3(self, a, b) || out.scalar_type() != at::kBFloat16)
    return at::cpu::baddbmm_outf(self, a, b, beta, alpha, out);
  return assign(out, at::cpu::baddbmm(f32(self), f32(a), f32(b), beta, alpha));
}

at::Tensor& baddbmm_(at::Tensor& self, const at::Tensor& a, const at::Tensor& b,
                     const at::Scalar& beta, const at::Scalar& alpha) {
  if (!widen3(self, a, b)) return at::cpu::baddbmm_(self, a, b, beta, alpha);
  return assign(self, at::cpu::baddbmm(f32(self), f32(a), f32(b), beta, alpha));
}

// The dispatcher warns once per kernel it replaces; the replacement is this file's purpose, so
// those lines are dropped while it registers.
class Quiet : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

bool install() {
  if (cpu_has_native_bf16_matmul()) return false;
  const char* choice = ::zt::env::get(env::kCpuBf16Matmul);
  if (choice != nullptr && std::strcmp(choice, "torch") == 0) return false;
  // Runs while the library loads, before zerotorch's logging exists: stderr, once per process.
  if (choice != nullptr && *choice != '\0' && std::strcmp(choice, "fp32") != 0) {
    std::fprintf(stderr, "[zt W] %s=%s is not fp32 or torch; bf16 products go through fp32\n",
                 env::kCpuBf16Matmul, choice);
  }
  Quiet quiet;
  c10::WarningUtils::WarningHandlerGuard guard(&quiet);
  // Kept for the life of the process: destroying it would unregister the kernels.
  static auto* library =
      new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::CPU, __FILE__, __LINE__);
  library->impl("mm", TORCH_FN(mm));
  library->impl("mm.out", TORCH_FN(mm_out));
  library->impl("addmm", TORCH_FN(addmm));
  library->impl("addmm.out", TORCH_FN(addmm_out));
  library->impl("addmm_", TORCH_FN(addmm_));
  library->impl("bmm", TORCH_FN(bmm));
  library->impl("bmm.out", TORCH_FN(bmm_out));
  library->impl("baddbmm", TORCH_FN(baddbmm));
  library->impl("baddbmm.out", TORCH_FN(baddbmm_out));
  library->impl("baddbmm_", TORCH_FN(baddbmm_));
  return true;
}

// Registered when zt_core loads, so every program, test and the Python module multiply the same
// way from their first product on.
const bool installed = install();

}  // namespace

bool cpu_bf16_matmul_through_fp32() {
  return installed;
}

bool cpu_has_native_bf16_matmul() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq");
#else
  return true;
#endif
}

}  // namespace zt
