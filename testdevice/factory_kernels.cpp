// zttest's allocating kernels: empty and empty_strided, the two every factory, copy and fallback
// result goes through. Memory comes from the device allocator (allocator.h) on the requested
// device, made current for the allocation as CUDA's kernels do.

#include <optional>

#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "testdevice/allocator.h"
#include "testdevice/test_device.h"

namespace zt::testdevice {
namespace {

constexpr c10::DispatchKeySet kDeviceKeys(c10::DispatchKey::PrivateUse1);

c10::Device checked_device(std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                           std::optional<bool> pin_memory) {
  const c10::Device where = c10::device_or_default(device);
  TORCH_CHECK(where.type() == kDeviceType, "zttest: empty on ", where);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "zttest: only strided tensors, not ", c10::layout_or_default(layout));
  // CUDA's wording (empty_cuda).
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "Only dense CPU tensors can be pinned");
  return where;
}

at::Tensor empty_memory_format_kernel(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                                      std::optional<c10::Layout> layout,
                                      std::optional<c10::Device> device,
                                      std::optional<bool> pin_memory,
                                      std::optional<c10::MemoryFormat> memory_format) {
  const c10::DeviceGuard guard(checked_device(layout, device, pin_memory));
  return at::detail::empty_generic(size, device_allocator(), kDeviceKeys,
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided_kernel(c10::IntArrayRef size, c10::IntArrayRef stride,
                                std::optional<c10::ScalarType> dtype,
                                std::optional<c10::Layout> layout,
                                std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  const c10::DeviceGuard guard(checked_device(layout, device, pin_memory));
  return at::detail::empty_strided_generic(size, stride, device_allocator(), kDeviceKeys,
                                           c10::dtype_or_default(dtype));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format_kernel));
  m.impl("empty_strided", TORCH_FN(empty_strided_kernel));
}

}  // namespace zt::testdevice
