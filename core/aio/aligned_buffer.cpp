#include "core/aio/aligned_buffer.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include <ATen/ATen.h>

#include "base/error.h"
#include "core/aio/aio_options.h"

namespace zt::aio {

AlignedBuffer::AlignedBuffer(int64_t bytes) : capacity_(align_up(bytes)) {
  ZT_CHECK(bytes >= 0, "AlignedBuffer: negative size ", bytes);
  if (capacity_ == 0) return;
  if (posix_memalign(&data_, kAlignment, static_cast<size_t>(capacity_)) != 0) {
    data_ = nullptr;
    ZT_THROW("AlignedBuffer: cannot allocate ", capacity_, " bytes of host memory for NVMe I/O");
  }
  std::memset(data_, 0, static_cast<size_t>(capacity_));
}

AlignedBuffer::~AlignedBuffer() {
  std::free(data_);
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), capacity_(std::exchange(other.capacity_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

at::Tensor AlignedBuffer::view(at::ScalarType dtype, int64_t offset_bytes, int64_t numel) const {
  const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(dtype));
  ZT_INTERNAL_ASSERT(offset_bytes >= 0 && numel >= 0 && offset_bytes + bytes <= capacity_,
                     "AlignedBuffer::view past the buffer: offset ", offset_bytes, " + ", bytes,
                     " > ", capacity_);
  return at::from_blob(static_cast<char*>(data_) + offset_bytes, {numel},
                       at::TensorOptions().dtype(dtype).device(at::kCPU));
}

}  // namespace zt::aio
