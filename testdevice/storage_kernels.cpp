// zttest's kernels that change which memory a tensor has: resize_, the set_ family, and what
// Variable::set_data and Tensor::record_stream ask of a backend. zerotorch releases and refills
// storages, points parameters into flat buffers with set_data and resizes flat buffers, so these
// must keep storages shared (never copy) and keep memory on the tensor's device.
//
//   resize_                  growing allocates on the tensor's device (its DeviceGuard), not on
//                            whatever device is current.
//   set_ (4 overloads)       LibTorch's checks, including "Attempted to set the storage of a
//                            tensor on device ... to a storage on different device"; the
//                            argument-less set_ gives an empty storage of this device.
//   _has_compatible_shallow_copy_type
//                            set_data between a CPU and a zttest tensor is allowed, as between
//                            CPU and CUDA (dense tensors of different backends), so
//                            Module::to(zttest) works.
//   record_stream            checks the stream; nothing to record (no caching allocator).

#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Storage.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "testdevice/allocator.h"
#include "testdevice/device_guard.h"
#include "testdevice/stream_order.h"
#include "testdevice/test_device.h"

namespace zt::testdevice {
namespace {

const at::Tensor& resize_kernel(const at::Tensor& self, c10::SymIntArrayRef size,
                                std::optional<c10::MemoryFormat> memory_format) {
  const c10::DeviceGuard guard(self.device());
  complete(current_stream(self.device().index()));  // growing copies the old contents
  return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), memory_format);
}

at::Tensor& set_storage_kernel(at::Tensor& self, c10::Storage source) {
  return at::native::set_(self, std::move(source));
}

at::Tensor& set_storage_offset_kernel(at::Tensor& self, c10::Storage source,
                                      c10::SymInt storage_offset, c10::SymIntArrayRef size,
                                      c10::SymIntArrayRef stride) {
  // The storage may be too small for the new sizes; it then grows, on self's device.
  const c10::DeviceGuard guard(self.device());
  return at::native::set_storage_cpu_(self, std::move(source), storage_offset.expect_int(),
                                      C10_AS_INTARRAYREF_SLOW(size),
                                      C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor& set_tensor_kernel(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_empty_kernel(at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, device_allocator(),
                       /*resizable=*/true);
  return self.set_(std::move(storage), 0, {0}, {});
}

bool dense_here_or_on_host(const at::Tensor& t) {
  return t.layout() == c10::kStrided && (t.device().is_cpu() || t.device().type() == kDeviceType);
}

bool compatible_shallow_copy_type_kernel(const at::Tensor& self, const at::Tensor& from) {
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
         (dense_here_or_on_host(self) && dense_here_or_on_host(from));
}

void record_stream_kernel(at::Tensor& /*self*/, c10::Stream stream) {
  check_stream(stream);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("resize_", TORCH_FN(resize_kernel));
  m.impl("set_.source_Storage", TORCH_FN(set_storage_kernel));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset_kernel));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor_kernel));
  m.impl("set_", TORCH_FN(set_empty_kernel));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(compatible_shallow_copy_type_kernel));
  m.impl("record_stream", TORCH_FN(record_stream_kernel));
}

}  // namespace zt::testdevice
