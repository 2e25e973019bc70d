#include "core/zero/pinned_host.h"

#include <cstdlib>
#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>

#include "base/cuda_plugin.h"
#include "base/error.h"

namespace zt::zero {

namespace {

// Plugin entry points (core/cuda/plugin_table_cuda.cpp); both return a cudaError_t.
using HostRegister = int32_t (*)(void* ptr, size_t bytes);
using HostUnregister = int32_t (*)(void* ptr);
constexpr const char* kHostRegister = "zt_cuda_host_register";
constexpr const char* kHostUnregister = "zt_cuda_host_unregister";

}  // namespace

at::Tensor pinned_host_empty(int64_t numel, at::ScalarType dtype, c10::DeviceType accelerator) {
  if (accelerator != c10::DeviceType::CUDA) {
    c10::Allocator* pinned = at::globalContext().getPinnedMemoryAllocator(accelerator);
    return at::Tensor(at::detail::empty_generic(
        {numel}, pinned, c10::DispatchKeySet(c10::DispatchKey::CPU), dtype, std::nullopt));
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(numel, 1)) * c10::elementSize(dtype);
  const size_t rounded = (bytes + page - 1) / page * page;  // whole pages: nothing shares them
  auto reg = reinterpret_cast<HostRegister>(cuda::require_symbol(kHostRegister, "pinned memory"));
  auto unreg =
      reinterpret_cast<HostUnregister>(cuda::require_symbol(kHostUnregister, "pinned memory"));
  void* ptr = std::aligned_alloc(page, rounded);
  ZT_CHECK(ptr != nullptr, "pinned host memory: cannot allocate ", rounded, " bytes");
  if (const int32_t err = reg(ptr, rounded); err != 0) {
    std::free(ptr);
    ZT_THROW("pinned host memory: registering ", rounded,
             " bytes with CUDA failed: ", cuda::require_kernels("pinned memory").error_string(err));
  }
  return at::from_blob(
      ptr, {numel},
      [unreg](void* p) {
        unreg(p);  // nothing to report from a deleter; the pages are freed either way
        std::free(p);
      },
      at::TensorOptions().dtype(dtype).device(at::kCPU));
}

at::Tensor pinned_host_copy(const at::Tensor& src, at::ScalarType dtype,
                            c10::DeviceType accelerator) {
  at::Tensor out = pinned_host_empty(src.numel(), dtype, accelerator);
  out.copy_(src.reshape({-1}));
  return out;
}

}  // namespace zt::zero
