// The launch environment for Python: where this process sits in the job (ztrun, torchrun,
// mpirun or srun, read as the C++ programs read it, parallel/env.h) and the job's rendezvous
// store (parallel/job_store.h) as a torch.distributed Store, so torch.distributed's own process
// group can be created over the same rendezvous the engine uses, also under plain mpirun, where
// no MASTER_ADDR/MASTER_PORT exists.
#include <chrono>
#include <pybind11/stl.h>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/python.h>

#include "base/fatal_exit.h"
#include "core/config/config.h"
#include "parallel/env.h"
#include "parallel/job_store.h"
#include "python/csrc/bindings.h"
#include "train/device.h"

namespace py = pybind11;

namespace zt::python {

void bind_launch(py::module_& m) {
  m.def("launch_env", [] {
    const dist::Env env = dist::Env::discover();
    py::dict d;
    d["rank"] = env.rank;
    d["world_size"] = env.world_size;
    d["local_rank"] = env.local_rank;
    d["local_world_size"] = env.local_world_size;
    d["launcher"] = env.launcher;
    d["master_addr"] = env.master_addr;
    d["master_port"] = env.master_port;
    return d;
  });
  // Where this rank trains, as the programs' --device (train/device.h): "auto", "cpu", "cuda",
  // "cuda:N", "zttest", "zttest:N" to a device name torch.device() takes.
  m.def(
      "resolve_device",
      [](const std::string& spec) { return resolve_device(spec, dist::Env::discover()).str(); },
      py::arg("spec"));
  // The job-wide stop a failed rank calls for (base/fatal_exit.h): under the MPI runtime,
  // MPI_Abort, which does not return; with no backend that registered one, nothing.
  m.def(
      "stop_job", [](int exit_code) { call_fatal_exit_hook(exit_code); }, py::arg("exit_code"));
  // The top-level keys of a config file as written (core/config/config.h: config_file_keys):
  // which blocks the user's file gives, read as the engine reads it.
  m.def("config_file_keys", &config_file_keys, py::arg("path"));
  // A fresh namespace of the job store (every rank must call it the same number of times, in
  // the same order relative to engine creation).
  m.def(
      "job_store",
      [](double timeout_seconds) {
        const dist::Env env = dist::Env::discover();
        return dist::job_store(
            env, std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000.0)));
      },
      py::arg("timeout_seconds"));
}

}  // namespace zt::python
