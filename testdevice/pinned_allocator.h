#pragma once
// zttest's pinned host memory: what at::empty(..., pin_memory=true), Tensor::pin_memory() and
// is_pinned() use while the device is the process's accelerator (hooks.cpp). Host memory like
// any other, but every block is recorded, so is_pinned() is true for exactly the tensors whose
// memory came from here (any address inside a block, as cudaPointerGetAttributes answers), and a
// test can tell a pinned staging buffer from a pageable one.

#include <cstdint>

#include <c10/core/Allocator.h>

namespace zt::testdevice {

c10::Allocator* pinned_allocator();
// Bytes of pinned memory live now, and the most live at once since the library was loaded or
// reset_pinned_peak (the count a plan of pinned host memory is checked against).
int64_t live_pinned_bytes();
int64_t peak_pinned_bytes();
void reset_pinned_peak();
// Whether address p lies in a live block of pinned_allocator().
bool is_pinned_pointer(const void* p);

}  // namespace zt::testdevice
