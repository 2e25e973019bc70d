#include "parallel/dist.h"

#include "base/error.h"
#include "base/logging.h"
#include "parallel/job_store.h"
#include "parallel/nccl_communicator.h"
#include "parallel/recording_communicator.h"
#include "parallel/staging_communicator.h"
#ifdef ZT_HAVE_GLOO
#include "parallel/gloo_communicator.h"
#endif
#ifdef ZT_HAVE_MPI
#include "parallel/mpi_communicator.h"
#endif

namespace zt::dist {

Backend resolve_backend(const CommOptions& options, const Env& env) {
  const Backend b = options.backend;
  const bool cuda = options.cuda || (options.device && options.device->is_cuda());
  const bool other_accelerator = options.device && !options.device->is_cpu() && !cuda;
  ZT_CHECK(!(other_accelerator && b == Backend::kNccl),
           "communication backend nccl needs CUDA tensors, ", "but the engine's device is ",
           *options.device, " (use auto, gloo or mpi)");
  if (b != Backend::kAuto) return b;
  if (cuda && cuda_device_count() > 0) return Backend::kNccl;
  if (env.launcher == "mpi") return Backend::kMpi;
  return Backend::kGloo;
}

std::shared_ptr<Communicator> create_communicator(const CommOptions& options, const Env& env) {
  ZT_CHECK(options.timeout.count() > 0, "communication timeout must be > 0 ms, got ",
           options.timeout.count());
  const Backend backend = resolve_backend(options, env);
  std::shared_ptr<Communicator> comm;
  if (backend == Backend::kMpi) {
#ifdef ZT_HAVE_MPI
    ZT_CHECK(env.world_size == 1 || env.launcher == "mpi",
             "the mpi backend needs ranks started by mpirun, but this ", env.world_size,
             "-rank job was launched by ", env.launcher, " (use gloo or nccl)");
    MpiMode mode = parse_mpi_mode(options.mpi_mode);
    comm = MpiCommunicator::create_world(job_store(env, options.timeout), options.timeout, mode);
#else
    ZT_THROW("the mpi backend was not built (no MPI found at configure time); use gloo or nccl");
#endif
  } else if (backend == Backend::kGloo) {
#ifdef ZT_HAVE_GLOO
    comm = std::make_shared<GlooCommunicator>(job_store(env, options.timeout), env.rank,
                                              env.world_size, options.timeout,
                                              gloo_interfaces(env.master_addr, env.master_port));
#else
    ZT_THROW("the gloo backend was not built (no gloo headers found at configure time); use ",
             "mpi or nccl");
#endif
  } else {
    NcclCreateArgs args;
    args.store = job_store(env, options.timeout);
    args.rank = env.rank;
    args.size = env.world_size;
    args.device = options.device && options.device->is_cuda() && options.device->has_index()
                      ? options.device->index()
                      : cuda_device_for_rank(env, cuda_device_count());
    args.timeout = options.timeout;
    comm = create_nccl_communicator(args);
  }
  ZT_CHECK(comm->rank() == env.rank && comm->size() == env.world_size, backend_name(backend),
           " communicator sees rank ", comm->rank(), " of ", comm->size(),
           " but the launch environment says ", env.describe());
  ZT_LOG_DEBUG("communicator ", backend_name(backend), " ready: ", env.describe());
  if (options.device && !options.device->is_cpu() && !options.device->is_cuda()) {
    comm = std::make_shared<StagingCommunicator>(std::move(comm), *options.device);
  }
  return record_collectives(std::move(comm), options.flight.value_or(FlightOptions::from_env()),
                            options.comms_logger);
}

}  // namespace zt::dist
