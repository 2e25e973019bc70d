#pragma once
// AlignedBuffer: host memory for O_DIRECT transfers. The address is aligned to aio::kAlignment
// and the capacity rounded up to a multiple of it, so a transfer of any length from the start of
// the buffer may round its tail up without leaving the allocation. Zero-filled when allocated,
// so the padding written past a tensor's last byte is always zeros.
//
//   [ bytes the caller uses | zeros up to capacity ]   capacity = align_up(bytes)
//
// view(dtype, offset, numel) is a CPU tensor over part of the buffer (no copy); the buffer must
// outlive it.

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace zt::aio {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(int64_t bytes);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  void* data() const { return data_; }
  int64_t capacity() const { return capacity_; }
  // numel elements of dtype starting offset_bytes into the buffer (1-D, contiguous).
  at::Tensor view(at::ScalarType dtype, int64_t offset_bytes, int64_t numel) const;

 private:
  void* data_ = nullptr;
  int64_t capacity_ = 0;
};

}  // namespace zt::aio
