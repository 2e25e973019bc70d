#pragma once
// A CPU tensor over a zttest tensor's memory (host memory): same address, sizes, strides, dtype
// and conj/neg bits, not owning it. Kernels that can work in place (copies, fill, zero) run the
// CPU kernel on it instead of copying the tensor to the host and back as the fallback does. The
// device tensor must outlive it.

#include <ATen/core/Tensor.h>

namespace zt::testdevice {

// For reading: does not materialize a copy-on-write storage.
at::Tensor host_alias(const at::Tensor& device_tensor);
// For writing: materializes a copy-on-write storage first, as any write to the tensor would.
at::Tensor writable_host_alias(const at::Tensor& device_tensor);

}  // namespace zt::testdevice
