// The CUDA plugin's extern "C" entry point for Adam8bit on a GPU shard (optim/adam8bit.h).
// Compiled only into libzt_cuda.so; zt_optim reaches it through a function pointer.
#include <cuda_runtime.h>

#include "optim/adam8bit_launch.h"
#include "optim/cuda_launch.h"

namespace zt::optim::cuda_kernels {
cudaError_t adam8bit(const zt::optim::Adam8bitLaunch& launch, cudaStream_t stream);
}

extern "C" __attribute__((visibility("default"))) const char* zt_adam8bit(
    const zt::optim::Adam8bitLaunch* launch, void* stream) {
  const zt::cuda::LaunchOn on(launch->param, stream);  // the shard's device, not the current one
  const cudaError_t err = zt::optim::cuda_kernels::adam8bit(*launch, on.stream());
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}
