#pragma once
// The NCCL backend lives in the CUDA plugin (libzt_cuda.so, nccl_communicator_cuda.cpp) so that
// zt_parallel never links CUDA. This header is the contract between the two sides.
//
// NCCL timeline per collective (stream order):
//   LibTorch's current stream ──record ev_ready──┐
//   communicator's NCCL stream    wait ev_ready ─┴─ ncclAllReduce ... ── record ev_done
//   Work::wait(): LibTorch's current stream waits ev_done (no host block), as c10d does.
//   Work::is_completed(): cudaEventQuery(ev_done). barrier()'s wait() blocks the host, polling
//   ev_done up to the timeout.
//   Watchdog thread (nccl_watchdog.h), every 100 ms: drops finished works, polls
//   ncclCommGetAsyncError, and fails the communicator (recorded error, ncclCommAbort) on an async
//   error, a CUDA error, or a collective older than the timeout (the desync timeout error).
// The tensors' storage is recorded on the NCCL stream (CUDACachingAllocator::recordStream), so
// the caching allocator does not reuse it before the collective ends; works hold no tensors.
// Device: NcclCreateArgs::device (cuda_device_for_rank, env.h) becomes the creating thread's
// current CUDA device. ncclUniqueId: rank 0 creates it and publishes it in the job store
// (job_store.h).

#include <chrono>
#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "parallel/communicator.h"

namespace zt::dist {

struct NcclCreateArgs {
  c10::intrusive_ptr<c10d::Store> store;  // this communicator's namespace of the job store
  int rank = 0;
  int size = 1;
  int device = 0;  // CUDA device index this rank uses
  std::chrono::milliseconds timeout{0};
};

// The plugin's entry point, looked up by name kNcclFactorySymbol. Fills *out and returns true, or
// fills *error and returns false (exceptions do not cross the dlopen boundary; both sides are
// built by the same compiler and standard library, so the C++ types may).
using NcclFactory = bool (*)(const NcclCreateArgs* args, std::shared_ptr<Communicator>* out,
                             std::string* error);
inline constexpr const char* kNcclFactorySymbol = "zt_nccl_create_communicator";
// Number of CUDA devices the plugin sees: 0 without a GPU or driver; -1 when CUDA failed
// otherwise, with the CUDA error's name and text written to `why`.
using CudaDeviceCount = int (*)(char* why, size_t why_size);
inline constexpr const char* kCudaDeviceCountSymbol = "zt_nccl_device_count";

// From zt_parallel: loads the plugin and calls the factory; zt::Error naming why NCCL is
// unavailable (no plugin built, no GPU, NCCL failure).
std::shared_ptr<Communicator> create_nccl_communicator(const NcclCreateArgs& args);
// 0 when the plugin cannot be loaded or sees no device; a zt::Error naming the CUDA error when
// the devices are there but CUDA cannot count them (a broken driver, a device in a bad state).
int cuda_device_count();

}  // namespace zt::dist
