// The launch's sequence, tensor and expert groups for a Python model
// (python/zerotorch/model_parallel.py): the same exchanges and crossings the C++ LLaMA family
// calls (parallel/sequence_exchange.h, parallel/tensor_parallel.h, parallel/expert_exchange.h),
// differentiable where they are there, over the topology the engine is then built on. A Python
// model is split and its attention wrapped with these before the engine lays its parameters out
// (python/csrc/engine_bindings.cpp hands them over).
#include <memory>
#include <pybind11/stl.h>
#include <string>
#include <vector>

#include <torch/python.h>

#include "base/error.h"
#include "parallel/expert_exchange.h"
#include "parallel/sequence_exchange.h"
#include "parallel/tensor_parallel.h"
#include "python/csrc/bindings.h"
#include "python/csrc/model_parallel.h"

namespace py = pybind11;

namespace zt::python {
namespace {

dist::Communicator& group(const std::shared_ptr<dist::Communicator>& g, const char* what) {
  ZT_CHECK(g != nullptr, "no ", what, " group: its size is 1 in this job's config");
  return *g;
}

// Every rank's `t` summed over `g` (a copy; not differentiable): token counts, logged losses.
at::Tensor summed(const at::Tensor& t, const std::shared_ptr<dist::Communicator>& g) {
  at::Tensor out = t.detach().contiguous().clone();
  if (g != nullptr && g->size() > 1) g->all_reduce(out)->wait();
  return out;
}

// Every rank's `t` joined along `dim` in rank order, whatever each rank's extent (not
// differentiable): a split parameter made whole for a file.
at::Tensor joined(const at::Tensor& t, const std::shared_ptr<dist::Communicator>& g, int64_t dim) {
  if (g == nullptr || g->size() == 1) return t.detach().clone();
  const std::vector<int64_t> slices = dist::gather_sizes({t.size(dim)}, *g)[0];
  return dist::join_slices(t, dim, slices, *g);
}

}  // namespace

void bind_model_parallel(py::module_& m) {
  using MP = ModelParallelGroups;
  auto release = py::call_guard<py::gil_scoped_release>();
  py::class_<MP, std::shared_ptr<MP>>(m, "ModelParallelGroups")
      .def_property_readonly("sequence_parallel_size",
                             [](const MP& g) { return g.topology->sequence_parallel_size(); })
      .def_property_readonly("sequence_parallel_rank",
                             [](const MP& g) { return g.sequence ? g.sequence->rank() : 0; })
      .def_property_readonly("tensor_parallel_size",
                             [](const MP& g) { return g.topology->tensor_parallel_size(); })
      .def_property_readonly("tensor_parallel_rank",
                             [](const MP& g) { return g.tensor ? g.tensor->rank() : 0; })
      .def_property_readonly("expert_parallel_size",
                             [](const MP& g) { return g.topology->expert_parallel_size(); })
      .def_property_readonly("expert_parallel_rank",
                             [](const MP& g) { return g.expert ? g.expert->rank() : 0; })
      .def_property_readonly("data_parallel_size",
                             [](const MP& g) { return g.topology->data_parallel_size(); })
      .def_property_readonly("data_parallel_rank",
                             [](const MP& g) { return g.topology->data_parallel_rank(); })
      .def_readonly("preset_model", &MP::preset_model)
      .def_readonly("partition_config", &MP::partition_config)
      // `heads`: how many heads each rank takes (uneven splits); empty: H / sp each.
      .def(
          "sequence_to_heads",
          [](MP& g, const at::Tensor& x, const std::vector<int64_t>& heads) {
            return dist::sequence_to_heads(x, group(g.sequence, "sequence"), g.wire, heads);
          },
          py::arg("x"), py::arg("heads") = std::vector<int64_t>{}, release)
      .def(
          "heads_to_sequence",
          [](MP& g, const at::Tensor& x, const std::vector<int64_t>& heads) {
            return dist::heads_to_sequence(x, group(g.sequence, "sequence"), g.wire, heads);
          },
          py::arg("x"), py::arg("heads") = std::vector<int64_t>{}, release)
      .def(
          "sum_over_sequence", [](MP& g, const at::Tensor& t) { return summed(t, g.sequence); },
          py::arg("t"), release)
      // Every rank's (B, T/sp, ...) joined along the positions (not differentiable; integers
      // travel as fp32, exact below 2^24): position ids for an attention that reads them.
      .def(
          "gather_over_sequence",
          [](MP& g, const at::Tensor& t) {
            return dist::gather_sequence(t, group(g.sequence, "sequence"));
          },
          py::arg("t"), release)
      .def(
          "enter_tensor_group",
          [](MP& g, const at::Tensor& x) {
            return dist::enter_tensor_group(x, group(g.tensor, "tensor"));
          },
          py::arg("x"), release)
      .def(
          "leave_tensor_group",
          [](MP& g, const at::Tensor& x) {
            return dist::leave_tensor_group(x, group(g.tensor, "tensor"));
          },
          py::arg("x"), release)
      .def(
          "sum_over_tensor_group", [](MP& g, const at::Tensor& t) { return summed(t, g.tensor); },
          py::arg("t"), release)
      .def(
          "join_over_tensor_group",
          [](MP& g, const at::Tensor& t, int64_t dim) { return joined(t, g.tensor, dim); },
          py::arg("t"), py::arg("dim"), release)
      // Expert parallelism: rows traded over the expert group in equal chunks (differentiable),
      // and every rank's per-expert counts (result[source][expert]).
      .def(
          "exchange_expert_rows",
          [](MP& g, const at::Tensor& x) {
            return dist::exchange_rows(x, group(g.expert, "expert"));
          },
          py::arg("x"), release)
      .def(
          "gather_expert_counts",
          [](MP& g, const std::vector<int64_t>& mine) {
            return dist::gather_expert_counts(mine, group(g.expert, "expert"));
          },
          py::arg("mine"), release)
      // A parameter split over whichever group splits parameters (tensor or expert), joined.
      .def(
          "join_over_split_group",
          [](MP& g, const at::Tensor& t, int64_t dim) {
            return joined(t, g.topology->split(), dim);
          },
          py::arg("t"), py::arg("dim"), release)
      .def(
          "check_same_on_tensor_group",
          [](MP& g, const at::Tensor& t, const std::string& what) {
            if (g.tensor) dist::check_same_on_group(t, *g.tensor, what.c_str());
          },
          py::arg("t"), py::arg("what"), release);
}

}  // namespace zt::python
