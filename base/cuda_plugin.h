#pragma once
// The CUDA plugin: libzt_cuda.so, built when ZT_WITH_CUDA is on, holds every CUDA kernel and the
// NCCL backend. zerotorch's libraries link only LibTorch's CPU part; the plugin (which pulls in
// libtorch_cuda, cudart and NCCL) is dlopen'ed on first use, so a CPU-only run never needs the
// CUDA libraries and a CUDA build still runs on a machine without a GPU.
//
// zt_cuda_kernels(), the plugin's C entry point, returns the table below: what every area needs
// (the CUDA error names, the device count). Everything else the plugin exports is an extern "C"
// symbol of the area that owns it (the fused optimizers' launchers, the NCCL communicator's
// factory, host-memory registration), looked up with require_symbol. Kernel launchers take raw
// device pointers (or a struct of them) and a cudaStream_t passed as void*; they enqueue work on
// the pointers' device (optim/cuda_launch.h) and return at once.

#include <cstdint>
#include <string>

namespace zt::cuda {

// Bumped whenever the table's layout changes; a mismatched plugin is refused with a message.
inline constexpr int kKernelsAbiVersion = 3;

struct Kernels {
  int32_t abi_version;
  const char* (*error_string)(int32_t cuda_error);
  // GPUs visible: 0 without a GPU or driver; -e for any other CUDA error e (error_string(e)).
  int32_t (*device_count)();
};

// True when this build has the plugin (ZT_WITH_CUDA was on).
bool plugin_built();
// The plugin's table, loading it on first call; nullptr when it cannot be loaded, with the
// reason in load_error() (no plugin built, library missing, ABI mismatch).
const Kernels* kernels();
const std::string& load_error();
// kernels() or a zt::Error naming why CUDA is unavailable and what asked for it.
const Kernels& require_kernels(const char* what);
// Any other extern "C" entry point of the plugin (e.g. an area's own factory, such as the NCCL
// communicator's), or a zt::Error naming the symbol and why it is unavailable. Areas declare the
// signature next to their own code; this table stays small.
void* require_symbol(const char* name, const char* what);
// The same lookup without the error: nullptr when the plugin cannot be loaded or lacks `name`.
void* find_symbol(const char* name);

}  // namespace zt::cuda
