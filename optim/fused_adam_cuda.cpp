// The CUDA plugin's extern "C" entry point for FusedAdam (optim/fused_adam.h). Compiled only into
// libzt_cuda.so; zt_optim reaches it through a function pointer, never by linking.
#include <cuda_runtime.h>

#include "optim/cuda_launch.h"
#include "optim/fused_adam_launch.h"

namespace zt::optim::cuda_kernels {
cudaError_t fused_adam(const zt::optim::FusedAdamLaunch& launch, cudaStream_t stream);
}

extern "C" __attribute__((visibility("default"))) const char* zt_fused_adam(
    const zt::optim::FusedAdamLaunch* launch, void* stream) {
  const zt::cuda::LaunchOn on(launch->param, stream);  // the shard's device, not the current one
  const cudaError_t err = zt::optim::cuda_kernels::fused_adam(*launch, on.stream());
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}
