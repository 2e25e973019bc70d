// The CUDA plugin's extern "C" entry point for Adam8bit on a GPU shard (optim/adam8bit.h).
// Compiled only into libzt_cuda.so; zt_optim reaches it through a function pointer.
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include "optim/adam8bit_launch.h"

namespace zt::optim::cuda_kernels {
cudaError_t adam8bit(const zt::optim::Adam8bitLaunch& launch, cudaStream_t stream);
}

extern "C" __attribute__((visibility("default"))) const char* zt_adam8bit(
    const zt::optim::Adam8bitLaunch* launch, void* stream) {
  cudaStream_t s =
      stream ? static_cast<cudaStream_t>(stream) : c10::cuda::getCurrentCUDAStream().stream();
  const cudaError_t err = zt::optim::cuda_kernels::adam8bit(*launch, s);
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}
