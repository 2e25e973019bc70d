// The NCCL backend's two entry points into the CUDA plugin (parallel/nccl_communicator.h),
// found through the one plugin loader (base/cuda_plugin.h).
#include "base/cuda_plugin.h"
#include "base/error.h"
#include "parallel/nccl_communicator.h"

namespace zt::dist {

int cuda_device_count() {
  auto fn = reinterpret_cast<CudaDeviceCount>(cuda::find_symbol(kCudaDeviceCountSymbol));
  if (!fn) return 0;  // no plugin (built without CUDA, or it cannot load): no GPU to use
  char why[256] = {0};
  const int n = fn(why, sizeof(why));
  ZT_CHECK(n >= 0, "CUDA cannot count the GPUs: ", why);
  return n;
}

std::shared_ptr<Communicator> create_nccl_communicator(const NcclCreateArgs& args) {
  auto factory =
      reinterpret_cast<NcclFactory>(cuda::require_symbol(kNcclFactorySymbol, "the nccl backend"));
  ZT_CHECK(cuda_device_count() > 0, "the nccl backend needs a CUDA device, but none is visible");
  std::string error;
  std::shared_ptr<Communicator> comm;
  if (!factory(&args, &comm, &error)) {
    ZT_THROW_KIND(ErrorKind::kComm, "nccl communicator creation failed: ", error);
  }
  return comm;
}

}  // namespace zt::dist
