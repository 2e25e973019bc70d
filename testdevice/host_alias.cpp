#include "testdevice/host_alias.h"

#include <ATen/Functions.h>

namespace zt::testdevice {

namespace {

at::Tensor alias_at(void* data, const at::Tensor& device_tensor) {
  at::Tensor alias = at::from_blob(data, device_tensor.sizes(), device_tensor.strides(),
                                   device_tensor.options().device(c10::kCPU));
  // Lazy conjugation and negation are flags on the tensor, not in the memory.
  alias._set_conj(device_tensor.is_conj());
  alias._set_neg(device_tensor.is_neg());
  return alias;
}

}  // namespace

at::Tensor host_alias(const at::Tensor& device_tensor) {
  return alias_at(const_cast<void*>(device_tensor.const_data_ptr()), device_tensor);
}

at::Tensor writable_host_alias(const at::Tensor& device_tensor) {
  return alias_at(device_tensor.mutable_data_ptr(), device_tensor);
}

}  // namespace zt::testdevice
