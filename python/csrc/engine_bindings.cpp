// The engine for a Python torch.nn.Module. The engine works on a torch::nn::Module tree; a Python
// module becomes one by mirroring: every submodule under its own name, its direct parameters and
// buffers registered under theirs, each the Python tensor itself (the same TensorImpl). So what
// the engine does to a parameter (its values moved into a flat buffer, cast to the compute dtype,
// updated by the step) is done to the Python model's parameter, and the gradient hooks the engine
// registers fire in the Python model's backward. Forward and the loss stay Python; backward,
// the reduction, the step and checkpoints are the C++ engine's.
#include <map>
#include <memory>
#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <set>
#include <string>
#include <vector>

#include <torch/python.h>

#include "base/error.h"
#include "core/checkpoint/checkpoint.h"
#include "core/engine.h"
#include "python/csrc/bindings.h"
#include "train/initialize.h"

namespace py = pybind11;

namespace zt::python {
namespace {

// The mirror of `module` (a torch.nn.Module). A parameter reachable under two names (tied
// weights) is registered under the first only, as named_parameters() lists it once.
std::shared_ptr<torch::nn::Module> mirror(const py::handle& module, std::set<const void*>& seen) {
  auto m = std::make_shared<torch::nn::Module>();
  for (auto item : module.attr("_parameters").cast<py::dict>()) {
    if (item.second.is_none()) continue;
    at::Tensor p = item.second.cast<at::Tensor>();
    if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;
    m->register_parameter(item.first.cast<std::string>(), p, p.requires_grad());
  }
  for (auto item : module.attr("_buffers").cast<py::dict>()) {
    if (item.second.is_none()) continue;
    m->register_buffer(item.first.cast<std::string>(), item.second.cast<at::Tensor>());
  }
  for (auto item : module.attr("_modules").cast<py::dict>()) {
    if (item.second.is_none()) continue;
    m->register_module(item.first.cast<std::string>(), mirror(item.second, seen));
  }
  return m;
}

// The job and its engine, as zt::initialize made them for the mirrored model.
class PyEngine {
 public:
  PyEngine(const py::object& module, const std::string& config_path,
           const std::vector<std::string>& overrides, std::optional<int64_t> hidden_size) {
    std::set<const void*> seen;
    std::shared_ptr<torch::nn::Module> model = mirror(module, seen);
    LaunchOptions lo;
    lo.config_path = config_path;
    lo.overrides = overrides;
    lo.program.hidden_size = hidden_size;
    Launch launch = zt::launch(lo);
    ZT_CHECK(launch.config.zero_optimization.stage < 3,
             "zero_optimization.stage 3 is not yet available for Python modules (stages 0-2 are)");
    training_ = zt::initialize(std::move(launch), std::move(model));
  }

  Engine& engine() { return *training_.engine; }
  const Config& config() const { return training_.config; }
  int rank() const { return training_.comm->rank(); }
  int world_size() const { return training_.comm->size(); }

 private:
  Training training_;
};

}  // namespace

void bind_engine(py::module_& m) {
  py::class_<PyEngine>(m, "Engine")
      .def(py::init<const py::object&, const std::string&, const std::vector<std::string>&,
                    std::optional<int64_t>>(),
           py::arg("module"), py::arg("config_path"), py::arg("overrides"), py::arg("hidden_size"))
      // fn runs the Python forward; the tensor it returns decides, at stage 3, whether a backward
      // follows.
      .def(
          "forward",
          [](PyEngine& e, const std::function<at::Tensor()>& fn) { return e.engine().forward(fn); },
          py::arg("fn"))
      // The backward may run Python autograd functions (checkpointing) on other threads.
      .def(
          "backward", [](PyEngine& e, const at::Tensor& loss) { e.engine().backward(loss); },
          py::arg("loss"), py::call_guard<py::gil_scoped_release>())
      .def(
          "step", [](PyEngine& e) { e.engine().step(); }, py::call_guard<py::gil_scoped_release>())
      .def("zero_grad", [](PyEngine& e) { e.engine().zero_grad(); })
      .def(
          "train", [](PyEngine& e, bool on) { e.engine().train(on); }, py::arg("on"))
      .def("get_lr", [](PyEngine& e) { return e.engine().get_lr(); })
      .def("is_gradient_accumulation_boundary",
           [](PyEngine& e) { return e.engine().is_gradient_accumulation_boundary(); })
      .def_property_readonly("global_step", [](PyEngine& e) { return e.engine().global_step(); })
      .def_property_readonly("micro_steps", [](PyEngine& e) { return e.engine().micro_steps(); })
      .def_property_readonly("skipped_steps",
                             [](PyEngine& e) { return e.engine().skipped_steps(); })
      .def_property_readonly("loss_scale", [](PyEngine& e) { return e.engine().loss_scale(); })
      .def_property_readonly("last_grad_norm",
                             [](PyEngine& e) { return e.engine().last_grad_norm(); })
      .def_property_readonly("rank", &PyEngine::rank)
      .def_property_readonly("world_size", &PyEngine::world_size)
      .def_property_readonly("gradient_accumulation_steps",
                             [](PyEngine& e) { return e.config().gradient_accumulation_steps; })
      .def_property_readonly("train_micro_batch_size_per_gpu",
                             [](PyEngine& e) { return e.config().train_micro_batch_size_per_gpu; })
      .def_property_readonly("config_json", [](PyEngine& e) { return e.config().to_json(); })
      .def(
          "save_checkpoint",
          [](PyEngine& e, const std::string& dir, const std::string& tag,
             const std::map<std::string, std::string>& client) {
            CheckpointOptions o;
            o.config_json = e.config().to_json(false);
            save_checkpoint(e.engine(), dir, tag, client, o);
          },
          py::arg("dir"), py::arg("tag"), py::arg("client_state"),
          py::call_guard<py::gil_scoped_release>())
      .def(
          "load_checkpoint",
          [](PyEngine& e, const std::string& dir, const std::string& tag) {
            return load_checkpoint(e.engine(), dir, tag);
          },
          py::arg("dir"), py::arg("tag"), py::call_guard<py::gil_scoped_release>());
}

}  // namespace zt::python
