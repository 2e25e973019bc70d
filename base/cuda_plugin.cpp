#include "base/cuda_plugin.h"

#include <cstdlib>
#include <dlfcn.h>
#include <mutex>

#include "base/env_vars.h"
#include "base/error.h"
#include "base/logging.h"

namespace zt::cuda {
namespace {

struct Plugin {
  void* handle = nullptr;
  const Kernels* table = nullptr;
  std::string error;
};

// libzt_cuda.so is built next to libzt_base.so; ZT_CUDA_PLUGIN overrides the path.
std::string plugin_path() {
  if (const char* p = std::getenv(env::kCudaPlugin)) return p;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&plugin_built), &info) && info.dli_fname) {
    std::string self = info.dli_fname;
    auto slash = self.rfind('/');
    if (slash != std::string::npos) return self.substr(0, slash + 1) + "libzt_cuda.so";
  }
  return "libzt_cuda.so";
}

Plugin load() {
  Plugin p;
  if (!plugin_built()) {
    p.error = "zerotorch was built without CUDA (ZT_WITH_CUDA=OFF or nvcc/CUDA LibTorch missing)";
    return p;
  }
  std::string path = plugin_path();
  // RTLD_GLOBAL: libtorch_cuda's symbols and CUDA hooks must be visible to LibTorch itself.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    p.error = detail::str("cannot load CUDA plugin ", path, ": ", dlerror());
    return p;
  }
  using Entry = const Kernels* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, "zt_cuda_kernels"));
  if (!entry) {
    p.error = detail::str("CUDA plugin ", path, " has no zt_cuda_kernels symbol");
    return p;
  }
  const Kernels* table = entry();
  if (!table || table->abi_version != kKernelsAbiVersion) {
    p.error =
        detail::str("CUDA plugin ", path, " has ABI version ", table ? table->abi_version : -1,
                    ", expected ", kKernelsAbiVersion, " (stale build?)");
    return p;
  }
  p.handle = handle;
  p.table = table;
  ZT_LOG_DEBUG("loaded CUDA plugin ", path);
  return p;
}

const Plugin& plugin() {
  static const Plugin p = load();
  return p;
}

}  // namespace

bool plugin_built() {
#ifdef ZT_CUDA_ENABLED
  return true;
#else
  return false;
#endif
}

const Kernels* kernels() {
  return plugin().table;
}
const std::string& load_error() {
  return plugin().error;
}

const Kernels& require_kernels(const char* what) {
  const Kernels* k = kernels();
  ZT_CHECK(k != nullptr, what, " needs CUDA, but ", load_error());
  return *k;
}

void* require_symbol(const char* name, const char* what) {
  require_kernels(what);
  void* sym = dlsym(plugin().handle, name);
  ZT_CHECK(sym != nullptr, what, " needs the CUDA plugin's ", name,
           ", which it does not export (stale build?)");
  return sym;
}

void* find_symbol(const char* name) {
  if (!kernels()) return nullptr;
  return dlsym(plugin().handle, name);
}

}  // namespace zt::cuda
