#pragma once
// Stage 3 frees a full buffer's bytes while autograd and the modules keep its parameters (views
// of it): the storage itself loses its data pointer, so sizes stay visible and nothing is
// reallocated behind autograd's back (docs/DESIGN.md, "The overlap timeline"). These three calls
// are the only places that touch a StorageImpl directly.

#include <cstddef>
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "core/zero/flat_buffer.h"

namespace zt::zero {

// Frees t's storage bytes; t (and every view of it) keeps its sizes.
void release_storage(const at::Tensor& t);
// Gives t's storage nbytes uninitialised bytes from its own allocator.
void refill_storage(const at::Tensor& t, size_t nbytes);
// A contiguous (numel,) tensor whose storage holds no bytes, as if allocated and released at
// once, without the allocation: partitioned construction binds a unit's parameters to it.
at::Tensor empty_released(int64_t numel, const at::TensorOptions& options);
// Makes every parameter of `layout` a view of its range of `flat`, a released buffer (no bytes):
// views are cut while the storage claims its full size (narrow checks bounds) but has no data.
void view_released(const dist::FlatLayout& layout, const at::Tensor& flat);

}  // namespace zt::zero
