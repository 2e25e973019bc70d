#include "core/zero/released_storage.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>

#include "base/error.h"

namespace zt::zero {

void release_storage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

void refill_storage(const at::Tensor& t, size_t nbytes) {
  // A device allocator (CUDA's caching allocator) allocates on the current device: make it the
  // tensor's, which need not be current on this thread.
  const c10::OptionalDeviceGuard on(t.device());
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}

at::Tensor empty_released(int64_t numel, const at::TensorOptions& options) {
  // An empty tensor owns a zero-byte storage with the device's allocator (what refill_storage
  // allocates from); only its sizes grow.
  at::Tensor t = at::empty({0}, options.requires_grad(false));
  t.unsafeGetTensorImpl()->set_sizes_contiguous({numel});
  return t;
}

void view_released(const dist::FlatLayout& layout, const at::Tensor& flat) {
  c10::StorageImpl* s = flat.storage().unsafeGetStorageImpl();
  ZT_INTERNAL_ASSERT(s->nbytes() == 0, "view_released on a buffer holding ", s->nbytes(), " B");
  s->set_nbytes(static_cast<size_t>(flat.numel()) * flat.element_size());
  layout.view_parameters(flat);
  s->set_nbytes(0);
}

}  // namespace zt::zero
