#pragma once
// zttest: a host-backed test device, a separate device type for the tests.
//
// On a CPU-only machine the model's device and the host are the same device, so a test cannot
// see a tensor left on the wrong one. libzt_testdevice.so registers, through PyTorch's
// PrivateUse1 extension point, a device type named "zttest" with two devices (zttest:0 and
// zttest:1) whose memory is host memory and whose kernels are LibTorch's CPU kernels. To
// LibTorch it is an accelerator like CUDA: at::Device("zttest:1") parses, at::getAccelerator()
// names it, at::manual_seed seeds its generators, autograd runs its backward on a device thread,
// and every mistake CUDA refuses it refuses too, with CUDA's wording:
//
//   - an op mixing a zttest tensor with a CPU tensor, or tensors of zttest:0 and zttest:1:
//     "Expected all tensors to be on the same device, but found at least two devices, zttest:0
//     and cpu!". Allowed, as CUDA allows them: 0-dim CPU tensors (scalars) anywhere; CPU index
//     tensors in the `indices` of the indexing ops index, index_put(_), _index_put_impl_,
//     _unsafe_index(_put), which move their indices to the device themselves. index_select,
//     gather, embedding... take device indices only, as on CUDA.
//   - a random op on a zttest tensor with a CPU generator, or the other way round ("Expected a
//     'zttest' device type for generator but found 'cpu'"). Each device has its own default
//     generator, seeded like CUDA's (c10::default_rng_seed_val) and by at::manual_seed.
//   - an event recorded on one device's stream and re-recorded on another's; a stream or device
//     index that does not exist; setting a tensor's storage to one of another device.
//   - a view op without a zttest kernel: the CPU fallback would return a copy, silently breaking
//     aliasing, so it throws "zttest: view op aten::xxx has no kernel; the CPU fallback would copy
//     it". View kernels (view, as_strided, _reshape_alias, unfold, view_as_real,
//     view_as_complex; the composite views narrow, select, slice, t, transpose, expand, permute,
//     split, chunk, unsqueeze, squeeze, flatten, diagonal, alias... reach them or need none)
//     return tensors sharing the base's storage, as on a GPU.
//
// Everything else runs on LibTorch's CPU kernels: the fallback copies the arguments to the host,
// runs the CPU kernel, copies the results back and writes mutated arguments back into the device
// tensors. Ops for which LibTorch would give a non-CPU backend a decomposition instead
// (native_layer_norm, addr...) are sent to the CPU kernel too, so results are bitwise those of a
// CPU run. Memory is 64-byte aligned host memory, allocated on the current device
// (c10::DeviceGuard) and counted per device (memory_allocated below); new memory holds 0xFF bytes
// (NaN), not the zeros of fresh host pages, so reading memory never written shows. Pinned host
// memory (at::empty(..., pin_memory=true), Tensor::pin_memory(), is_pinned()) comes from a host
// allocator that records its blocks.
//
// Streams: kernels run synchronously on the calling thread, but the copies a GPU runs
// asynchronously to the host (non_blocking, to or from pinned memory) are queued on their stream
// with poison in their destination until an event, a stream wait or a synchronization orders
// them before the reader (stream_order.h), so a missing wait between an offload copy and its
// reader fails here as it would on a GPU. A kernel racing a kernel or a device-to-device copy of
// another stream goes unnoticed; only a GPU run shows those. Its speed says nothing about a
// GPU's.
//
// Loading: no zerotorch library links it. A program (or test) that wants the device loads it once
// with load_test_device() before naming "zttest"; nothing can unload it (LibTorch keeps pointers
// to its kernels and guard). Once loaded in a process, the registered PrivateUse1 backend is the
// process's accelerator (at::getAccelerator()), even where CUDA is present.

#include <cstdint>
#include <cstdlib>
#include <dlfcn.h>
#include <string>

#include <c10/core/Device.h>
#include <c10/util/Exception.h>

namespace zt::testdevice {

inline constexpr c10::DeviceType kDeviceType = c10::DeviceType::PrivateUse1;
inline constexpr char kBackendName[] = "zttest";
inline constexpr int kDeviceCount = 2;
// The library's file name (its soname): what load_test_device() looks for on the search path.
inline constexpr char kLibraryName[] = "libzt_testdevice.so";
// The environment variable naming the library's path, which load_test_device's callers read.
inline constexpr char kLibraryEnv[] = "ZT_TESTDEVICE_LIBRARY";

// zttest:<index>.
inline c10::Device test_device(c10::DeviceIndex index = 0) {
  return c10::Device(kDeviceType, index);
}

// Loads the device library from `path` (a path, or a file name searched by dlopen: the calling
// program's RUNPATH, then LD_LIBRARY_PATH), once per process; later calls do nothing. Throws
// c10::Error if it cannot be loaded or is not the zttest device library.
inline void load_test_device(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  TORCH_CHECK(handle != nullptr, "zttest: cannot load the test device library ", path, ": ",
              dlerror());
  auto count = reinterpret_cast<int (*)()>(dlsym(handle, "zt_testdevice_device_count"));
  TORCH_CHECK(count != nullptr, "zttest: ", path, " is not the test device library");
  TORCH_CHECK(count() == kDeviceCount, "zttest: ", path, " reports ", count(),
              " devices, expected ", kDeviceCount);
}

// The same, from `path` (the caller's reading of $ZT_TESTDEVICE_LIBRARY) if set, else kLibraryName
// on the search path (a program in the build's bin/ finds it in ../lib through its RUNPATH).
inline void load_test_device(const char* path) {
  load_test_device(std::string(path != nullptr && *path != '\0' ? path : kLibraryName));
}

// Whether the library is loaded in this process (by load_test_device or by linking it).
inline bool test_device_loaded() {
  void* handle = dlopen(kLibraryName, RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) {
    return false;
  }
  dlclose(handle);
  return true;
}

namespace detail {

// A function of the loaded library's C API, found by name (the library's soname), so a program
// that only dlopen'ed it can call it.
template <typename Fn>
Fn library_function(const char* name) {
  void* handle = dlopen(kLibraryName, RTLD_LAZY | RTLD_NOLOAD);
  TORCH_CHECK(handle != nullptr, "zttest: the test device is not loaded (call load_test_device)");
  void* fn = dlsym(handle, name);
  dlclose(handle);  // NOLOAD took a reference; the library itself stays (RTLD_NODELETE)
  TORCH_CHECK(fn != nullptr, "zttest: the test device library has no ", name);
  return reinterpret_cast<Fn>(fn);
}

}  // namespace detail

// Bytes of device memory live on zttest:<device> now, and the most live since the library was
// loaded or reset_peak_memory_allocated (like torch.cuda.memory_allocated and
// max_memory_allocated; there is no cache, so allocated is reserved).
inline int64_t memory_allocated(c10::DeviceIndex device) {
  return detail::library_function<int64_t (*)(int)>("zt_testdevice_memory_allocated")(device);
}
inline int64_t max_memory_allocated(c10::DeviceIndex device) {
  return detail::library_function<int64_t (*)(int)>("zt_testdevice_max_memory_allocated")(device);
}
inline void reset_peak_memory_allocated(c10::DeviceIndex device) {
  detail::library_function<void (*)(int)>("zt_testdevice_reset_peak_memory_allocated")(device);
}
// Bytes of pinned host memory (what pin_memory gives while zttest is the accelerator) live now,
// and the most live at once since the library was loaded or reset_peak_pinned_bytes.
inline int64_t pinned_bytes() {
  return detail::library_function<int64_t (*)()>("zt_testdevice_pinned_bytes")();
}
inline int64_t max_pinned_bytes() {
  return detail::library_function<int64_t (*)()>("zt_testdevice_max_pinned_bytes")();
}
inline void reset_peak_pinned_bytes() {
  detail::library_function<void (*)()>("zt_testdevice_reset_peak_pinned_bytes")();
}

}  // namespace zt::testdevice
