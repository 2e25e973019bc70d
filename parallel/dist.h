#pragma once
// Creating the job's Communicator (docs/DESIGN.md, Communicator).
//
//   auto comm = zt::dist::create_communicator({.backend = zt::dist::Backend::kAuto});
//
// Backends:
//   "mpi"   OpenMPI non-blocking collectives on CPU tensors (mpi_communicator.h). Works under
//           mpirun, and for a single process without any launcher (MPI singleton init).
//   "gloo"  LibTorch's c10d ProcessGroupGloo on CPU tensors over the job store's TCPStore at
//           MASTER_ADDR:MASTER_PORT (gloo_communicator.h), or a HashStore for one process.
//   "nccl"  NCCL on CUDA tensors, from the CUDA plugin (nccl_communicator.h); needs a GPU.
//   "auto"  nccl when options.cuda and a CUDA device is usable; else mpi when launched by
//           mpirun; else gloo (torchrun/ztrun/Slurm with MASTER_ADDR, or one process alone).
// A single process with no launcher variables gets a working 1-rank communicator either way.
//
// Threading: a communicator is used from one thread at a time (the engine's autograd hooks run
// on the thread that called backward, on CPU); its works may be waited from any thread, in any
// order, several in flight at once. The mpi backend progresses collectives on its own thread
// (mpi_runtime.h), gloo on ProcessGroupGloo's worker threads, nccl on its CUDA stream.

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "parallel/backend.h"
#include "parallel/comms_logger.h"
#include "parallel/communicator.h"
#include "parallel/env.h"
#include "parallel/flight_recorder.h"

namespace zt::dist {

struct CommOptions {
  Backend backend = Backend::kAuto;
  // Default for every Work::wait() and for the rendezvous; tests use seconds.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  // The engine's tensors live on CUDA: "auto" then picks nccl (when the plugin and a device are
  // available), and nccl binds to cuda_device_for_rank (env.h), which becomes the current device.
  bool cuda = false;
  // Where the engine's tensors live, when the program chose (train/device.h); unset or the CPU:
  // decided by `cuda` alone. A CUDA device acts as `cuda` and, with an index, is the device nccl
  // binds to. Any other accelerator (a PrivateUse1 backend such as the host-backed test device)
  // has no collective library here: mpi or gloo as "auto" picks them for the host, wrapped in a
  // StagingCommunicator (staging_communicator.h) that takes only that device's tensors.
  std::optional<c10::Device> device;
  // mpi backend only: "auto" | "nonblocking" | "blocking" MPI collectives (mpi_communicator.h,
  // MpiMode: which OpenMPI algorithms run; all of them run off the caller's thread).
  std::string mpi_mode = "auto";
  // The flight recorder (flight_recorder.h); unset = FlightOptions::from_env() (on, 2000
  // entries, unless ZT_FLIGHT_BUFFER_SIZE=0).
  std::optional<FlightOptions> flight;
  // The config's comms_logger block (comms_logger.h); off by default.
  CommsLoggerOptions comms_logger;
};

// Every rank calls it with the same options, in the same order relative to other communicators.
// The backend comes wrapped in a RecordingCommunicator (recording_communicator.h) when the flight
// recorder or the comms logger is on.
std::shared_ptr<Communicator> create_communicator(const CommOptions& options,
                                                  const Env& env = Env::discover());

// The backend "auto" resolves to for these options and environment (no side effects beyond
// probing the CUDA plugin when options.cuda).
Backend resolve_backend(const CommOptions& options, const Env& env);

}  // namespace zt::dist
