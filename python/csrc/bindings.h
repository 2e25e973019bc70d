#pragma once
// The parts of the extension module zerotorch._C (python/csrc/module.cpp), one function per area
// bound. Tensors cross as torch.Tensor through LibTorch's own casters (torch/python.h); a
// zt::Error reaches Python as RuntimeError with its one-line message.

#include <pybind11/pybind11.h>

namespace zt::python {

// Token shards, the length-bucketed distributed sampler, dynamic padding (data/).
void bind_data(pybind11::module_& m);
// The launch environment and the job's rendezvous store (parallel/env.h, parallel/job_store.h).
void bind_launch(pybind11::module_& m);
// The engine over a Python torch.nn.Module, built by zt::launch / zt::initialize from a config.
void bind_engine(pybind11::module_& m);
// The sequence and tensor groups a Python model is split with (python/csrc/model_parallel.h).
void bind_model_parallel(pybind11::module_& m);

}  // namespace zt::python
