// Finding the CUDA plugin's NCCL entry points from zt_parallel.
//
// core/cuda_plugin.h has the project's loader (zt::cuda::require_symbol), but it lives in
// zt_core, which depends on zt_parallel, so zt_parallel cannot call it. We open the same
// libzt_cuda.so by the same rules (ZT_CUDA_PLUGIN, else next to the library that holds this
// code): dlopen of an already loaded library returns the same handle, so there is still one
// plugin per process.
#include <cstdlib>
#include <dlfcn.h>
#include <mutex>

#include "core/base/env_vars.h"
#include "core/base/error.h"
#include "parallel/nccl_communicator.h"

namespace zt::dist {
namespace {

struct Plugin {
  void* handle = nullptr;
  std::string error;
};

const Plugin& plugin() {
  static const Plugin p = [] {
    Plugin p;
    std::string path;
    if (const char* env_path = std::getenv(env::kCudaPlugin)) {
      path = env_path;
    } else {
      Dl_info info{};
      path = "libzt_cuda.so";
      if (dladdr(reinterpret_cast<void*>(&cuda_device_count), &info) && info.dli_fname) {
        std::string self = info.dli_fname;
        auto slash = self.rfind('/');
        if (slash != std::string::npos) path = self.substr(0, slash + 1) + "libzt_cuda.so";
      }
    }
    p.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!p.handle) {
      const char* e = dlerror();
      p.error = detail::str("cannot load CUDA plugin ", path, ": ", e ? e : "?",
                            " (built without CUDA?)");
    }
    return p;
  }();
  return p;
}

void* find(const char* name) {
  const Plugin& p = plugin();
  if (!p.handle) return nullptr;
  return dlsym(p.handle, name);
}

}  // namespace

int cuda_device_count() {
  auto fn = reinterpret_cast<CudaDeviceCount>(find(kCudaDeviceCountSymbol));
  if (!fn) return 0;
  char why[256] = {0};
  const int n = fn(why, sizeof(why));
  ZT_CHECK(n >= 0, "CUDA cannot count the GPUs: ", why);
  return n;
}

std::shared_ptr<Communicator> create_nccl_communicator(const NcclCreateArgs& args) {
  const Plugin& p = plugin();
  ZT_CHECK(p.handle != nullptr, "the nccl backend needs the CUDA plugin: ", p.error);
  auto factory = reinterpret_cast<NcclFactory>(find(kNcclFactorySymbol));
  ZT_CHECK(factory != nullptr, "the CUDA plugin does not export ", kNcclFactorySymbol,
           " (stale build?)");
  ZT_CHECK(cuda_device_count() > 0, "the nccl backend needs a CUDA device, but none is visible");
  std::string error;
  std::shared_ptr<Communicator> comm;
  if (!factory(&args, &comm, &error)) {
    ZT_THROW_KIND(ErrorKind::kComm, "nccl communicator creation failed: ", error);
  }
  return comm;
}

}  // namespace zt::dist
