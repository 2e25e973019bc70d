// The CUDA plugin's extern "C" entry point for the fused token cross-entropy
// (core/ops/cross_entropy.h). Compiled only into libzt_cuda.so; zt_core reaches it through a
// function pointer, never by linking.
#include <cuda_runtime.h>

#include "core/ops/cross_entropy_launch.h"
#include "optim/cuda_launch.h"

namespace zt::ops::cuda_kernels {
cudaError_t cross_entropy(const zt::ops::CrossEntropyLaunch& launch, cudaStream_t stream);
}

extern "C" __attribute__((visibility("default"))) const char* zt_cross_entropy(
    const zt::ops::CrossEntropyLaunch* launch, void* stream) {
  const zt::cuda::LaunchOn on(launch->logits, stream);  // the logits' device, not the current one
  const cudaError_t err = zt::ops::cuda_kernels::cross_entropy(*launch, on.stream());
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}
