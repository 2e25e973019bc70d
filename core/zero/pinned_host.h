#pragma once
// Page-locked host memory for the host side of a GPU model (offloaded masters, parameter shards,
// staging buffers), allocated exactly: page-aligned host pages registered with the CUDA driver
// (cudaHostRegister, through the CUDA plugin) and unregistered and freed with the tensor.
//
// PyTorch's pinned allocator (at::empty(..., pinned_memory(true))) is a caching allocator: it
// rounds every block up to a power of two and keeps freed blocks pinned for reuse. For long-lived
// buffers that are replaced once (an fp32 shard cast to a 16-bit one) that keeps up to twice the
// bytes resident, and the freed fp32 blocks stay pinned for the life of the process.

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace zt::zero {

// (numel,) of `dtype` in page-locked host memory for `accelerator`'s copies; uninitialised. For
// CUDA: registered exactly as above, which needs the CUDA plugin and a GPU (a zt::Error naming
// what failed otherwise). Any other accelerator (the test device): its own pinned allocator
// (PrivateUse1's hooks), so its copies take the same pinned paths a GPU's take.
at::Tensor pinned_host_empty(int64_t numel, at::ScalarType dtype,
                             c10::DeviceType accelerator = c10::DeviceType::CUDA);

// A copy of `src` in page-locked host memory for `accelerator`.
at::Tensor pinned_host_copy(const at::Tensor& src, at::ScalarType dtype,
                            c10::DeviceType accelerator = c10::DeviceType::CUDA);

}  // namespace zt::zero
