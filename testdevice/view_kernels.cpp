// zttest's view kernels: the view ops whose only kernels are per backend (CPU, CUDA, Meta), which
// without these would reach the fallback and be refused there (fallback.cpp). Every other view op
// of ATen (narrow, select, t, expand, split...) is composite: it ends in one of these or builds
// its view in device-generic code (tests/unit/testdevice/kernel_coverage_test.cpp checks the
// whole list). LibTorch's implementations used here are device-generic too: a TensorImpl over the
// same storage with new sizes and strides, as on a GPU.

#include <optional>

#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/SymIntArrayRef.h>
#include <torch/library.h>

namespace zt::testdevice {
namespace {

at::Tensor as_strided_kernel(const at::Tensor& self, c10::SymIntArrayRef size,
                             c10::SymIntArrayRef stride,
                             std::optional<c10::SymInt> storage_offset) {
  std::optional<int64_t> offset;
  if (storage_offset) {
    offset = storage_offset->expect_int();
  }
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size),
                                           C10_AS_INTARRAYREF_SLOW(stride), offset);
}

at::Tensor view_kernel(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias_kernel(const at::Tensor& self, c10::SymIntArrayRef size,
                                c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                    C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor unfold_kernel(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return at::native::unfold(self, dimension, size, step);
}

at::Tensor view_as_real_kernel(const at::Tensor& self) {
  return at::native::view_as_real(self);
}

at::Tensor view_as_complex_kernel(const at::Tensor& self) {
  return at::native::view_as_complex(self);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("as_strided", TORCH_FN(as_strided_kernel));
  m.impl("view", TORCH_FN(view_kernel));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias_kernel));
  m.impl("unfold", TORCH_FN(unfold_kernel));
  m.impl("view_as_real", TORCH_FN(view_as_real_kernel));
  m.impl("view_as_complex", TORCH_FN(view_as_complex_kernel));
}

}  // namespace zt::testdevice
