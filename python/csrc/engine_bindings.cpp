// The engine for a Python torch.nn.Module. The engine works on a torch::nn::Module tree; a Python
// module becomes one by mirroring: every submodule under its own name, its direct parameters and
// buffers registered under theirs, each the Python tensor itself (the same TensorImpl). So what
// the engine does to a parameter (its values moved into a flat buffer, cast to the compute dtype,
// updated by the step) is done to the Python model's parameter, and the gradient hooks the engine
// registers fire in the Python model's backward. Forward and the loss stay Python; backward,
// the reduction, the step and checkpoints are the C++ engine's. At stage 3 the Python layer
// (python/zerotorch/engine.py) puts forward hooks on the unit modules that make the calls
// zt::call_unit makes for a C++ unit (core/zero/call_unit.h).
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include <torch/python.h>

#include "base/env_vars.h"
#include "base/error.h"
#include "base/logging.h"
#include "core/checkpoint/async_checkpoint.h"
#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/model_export.h"
#include "core/config/engine_config.h"
#include "core/engine.h"
#include "core/profile/flops_profiler.h"
#include "core/zero/call_unit.h"
#include "core/zero/host_caching_allocator.h"
#include "python/csrc/bindings.h"
#include "python/csrc/model_parallel.h"
#include "train/initialize.h"

namespace py = pybind11;

namespace zt::python {
namespace {

// A Python module the engine.py layer marked with _zt_routed_unit (a transformers experts
// module): its mirror is a routed unit (core/zero/call_unit.h) when it is a stage-3 unit.
class RoutedMirror : public torch::nn::Module, public RoutedUnit {};

// The mirror of `module` (a torch.nn.Module). A parameter reachable under two names (tied
// weights) is registered under the first only, as named_parameters() lists it once.
std::shared_ptr<torch::nn::Module> mirror(const py::handle& module, std::set<const void*>& seen) {
  std::shared_ptr<torch::nn::Module> m = std::make_shared<torch::nn::Module>();
  if (py::hasattr(module, "_zt_routed_unit")) m = std::make_shared<RoutedMirror>();
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

// What the config's "auto" values resolve from (core/config/config.h), given by the Python layer
// by ProgramValues' field names; `origin` says where each came from.
ProgramValues program_values(const py::dict& d) {
  ProgramValues v;
  auto get = [&](const char* key, auto& field) {
    if (d.contains(key) && !d[key].is_none()) {
      field = d[key].cast<typename std::decay_t<decltype(field)>::value_type>();
    }
  };
  get("micro_batch_size", v.micro_batch_size);
  get("gradient_accumulation_steps", v.gradient_accumulation_steps);
  get("gradient_clipping", v.gradient_clipping);
  get("fp16", v.fp16);
  get("bf16", v.bf16);
  get("lr", v.lr);
  get("betas", v.betas);
  get("eps", v.eps);
  get("weight_decay", v.weight_decay);
  get("warmup_steps", v.warmup_steps);
  get("warmup_ratio", v.warmup_ratio);
  get("total_steps", v.total_steps);
  get("hidden_size", v.hidden_size);
  get("save_16bit_model", v.save_16bit_model);
  if (d.contains("origin")) v.origin = d["origin"].cast<std::map<std::string, std::string>>();
  return v;
}

// Whether the model's parameters are on the CPU (a model without any: yes).
bool model_on_cpu(torch::nn::Module& model) {
  for (const at::Tensor& p : model.parameters()) return p.is_cpu();
  return true;
}

// Partitioned construction of a model built under zerotorch.zero.Init: one unit at a time is
// made whole from the ranks' parts and cut into this rank's engine shards (PartitionedInit,
// core/zero/partitioned_init.h), so the model is never whole on any rank. A unit nested in
// another (a routed experts unit in its layer) is cut first, as PartitionedInit requires; the
// root takes what is left.
void adopt_parts(zero::PartitionedInit& parts, torch::nn::Module& model,
                 const std::vector<std::string>& units, const py::object& materialise) {
  std::vector<std::string> order = units;
  auto depth = [](const std::string& s) { return std::count(s.begin(), s.end(), '.'); };
  std::stable_sort(order.begin(), order.end(),
                   [&](const std::string& a, const std::string& b) { return depth(a) > depth(b); });
  auto modules = model.named_modules();
  for (const std::string& name : order) {
    materialise(name);
    parts.add_unit(name, *modules[name]);
  }
  materialise(std::string());
  parts.add_root(model);
}

// A learning-rate schedule computed in Python, as factors of the optimizer's lr
// (InitOptions::lr_factor): `lr(s)` is the factor of optimizer step s (0-based), as a PyTorch
// scheduler stepped after each optimizer step gives it (the Hugging Face Trainer's
// get_scheduler). The engine asks for lr_at(last_batch_iteration), the step before the one it
// takes (optim/lr_schedule.h), hence the + 1.
class PyLrSchedule : public optim::LrSchedule {
 public:
  PyLrSchedule(py::object lr, std::string name) : lr_(std::move(lr)), name_(std::move(name)) {}
  ~PyLrSchedule() override {
    py::gil_scoped_acquire gil;
    lr_ = py::object();
  }
  double lr_at(int64_t step) const override {
    py::gil_scoped_acquire gil;
    return lr_(std::max<int64_t>(step + 1, 0)).cast<double>();
  }
  std::string name() const override { return name_; }

 private:
  py::object lr_;
  std::string name_;
};

// The job and its engine, as zt::initialize made them for the mirrored model, from a config file
// (config_path) or a config given as JSON text (config_text, a dict's json.dumps). `units` are the
// stage-3 units by module name (named_modules() names, which the mirror keeps), or a callable
// that gives them for the config's stage3_module_granularity_threshold (known once the config
// is read here).
class PyEngine {
 public:
  PyEngine(const py::object& module, const std::string& config_path, const std::string& config_text,
           const std::vector<std::string>& overrides, const py::dict& program,
           const py::object& units_or_policy, const std::string& device, const py::object& split,
           const py::object& materialise, const py::object& lr_schedule) {
    LaunchOptions lo;
    lo.config_path = config_path;
    lo.config_text = config_text;
    lo.overrides = overrides;
    lo.program = program_values(program);
    lo.device = device;
    Launch launch = zt::launch(lo);
    InitOptions init;
    if (!lr_schedule.is_none()) {
      init.lr_factor = std::make_shared<PyLrSchedule>(lr_schedule.attr("lr"),
                                                      lr_schedule.attr("name").cast<std::string>());
    }
    // A model built under zerotorch.zero.Init holds each parameter's part (python/zerotorch/
    // zero.py); `materialise(prefix)` makes a submodule's parameters whole (collective). Where the
    // engine adopts partitioned construction (stage 3 without a tensor or expert split) that is
    // done unit by unit below; elsewhere the engine takes whole parameters, so the model is made
    // whole here, before a split cuts them.
    const bool built_partitioned = !materialise.is_none();
    if (built_partitioned && !launch.partitioned) {
      if (launch.comm->rank() == 0) {
        ZT_LOG_INFO("zerotorch.zero.Init: the model is gathered whole (ZeRO stage ",
                    launch.config.zero_optimization.stage,
                    launch.config.zero_optimization.stage == 3 ? " beside a tensor or expert split"
                                                               : " keeps parameters whole",
                    ")");
      }
      materialise(std::string());
    }
    // The model is split (its layers over the tensor group, its attention wrapped for the
    // sequence group) before it is mirrored: a split replaces parameters by their slices.
    groups_ = std::make_shared<ModelParallelGroups>();
    groups_->topology = launch.topology;
    groups_->sequence = launch.topology->sequence;
    groups_->tensor = launch.topology->tensor;
    groups_->expert = launch.topology->expert;
    groups_->wire = sequence_parallel_dtype(launch.config);
    groups_->preset_model = launch.config.tensor_parallel.preset_model;
    groups_->partition_config = launch.config.tensor_parallel.partition_config.text;
    if (!split.is_none()) {
      const py::dict made = split(groups_);
      init.sequence_parallel = made["sequence_parallel"].cast<bool>();
      init.tensor_split = made["tensor_split"].cast<std::map<std::string, int64_t>>();
      init.tensor_parallel = !init.tensor_split.empty();
      // The experts dealt over the expert group are split parameters too (dimension 0).
      const auto experts = made["expert_split"].cast<std::map<std::string, int64_t>>();
      // DeepSpeed's MoE layers deal their experts whole, each under its global name
      // (python/zerotorch/native_moe.py).
      for (auto& name : made["expert_dealt"].cast<std::vector<std::string>>()) {
        init.expert_dealt.insert(std::move(name));
      }
      init.expert_parallel = !experts.empty() || !init.expert_dealt.empty();
      init.tensor_split.insert(experts.begin(), experts.end());
      init.partition_config_applied = made["partition_config_applied"].cast<bool>();
    }
    std::set<const void*> seen;
    std::shared_ptr<torch::nn::Module> model = mirror(module, seen);
    if (PyCallable_Check(units_or_policy.ptr())) {
      init.units =
          units_or_policy(launch.config.zero_optimization.stage3_module_granularity_threshold)
              .cast<std::vector<std::string>>();
      init.units_follow_granularity = true;
    } else {
      init.units = units_or_policy.cast<std::vector<std::string>>();
    }
    units_ = init.units;
    {
      // The shards cut from the parts are made before the engine exists. A CPU model's engine
      // serves its host tensors from the host cache (core/zero/host_caching_allocator.h); so do
      // these, held here until the engine holds the cache, rather than glibc's heap, whose
      // holes between them the step's tensors would then fill and grow.
      struct CacheHold {
        bool held = false;
        ~CacheHold() {
          if (held) zero::release_host_cache();
        }
      } hold;
      if (built_partitioned && launch.partitioned && model_on_cpu(*model) &&
          env::choice(env::kHostCache, "1", {"0", "1"}) == "1") {
        zero::acquire_host_cache();
        hold.held = true;
      }
      if (built_partitioned && launch.partitioned) {
        adopt_parts(*launch.partitioned, *model, init.units, materialise);
      }
      training_ = zt::initialize(std::move(launch), model, init);
    }
    // Stage 3 registered hooks for every unit; below it none, and the unit calls are no-ops.
    for (const std::string& name : units_) {
      hooks_.push_back(UnitRegistry::instance().find(model->named_modules()[name].get()));
    }
  }

  Engine& engine() { return *training_.engine; }
  const std::shared_ptr<ModelParallelGroups>& groups() const { return groups_; }
  const Config& config() const { return training_.config; }
  const plan::MemoryPlan& memory_plan() const { return training_.memory_plan; }
  int rank() const { return training_.comm->rank(); }
  int world_size() const { return training_.comm->size(); }
  bool gathers_units() const { return !hooks_.empty() && hooks_.front() != nullptr; }
  const std::vector<std::string>& units() const { return units_; }
  UnitHooks& unit(size_t i) {
    ZT_CHECK(i < hooks_.size() && hooks_[i] != nullptr, "no stage-3 unit ", i);
    return *hooks_[i];
  }
  // checkpoint.writer.decoupled: the background saver (core/checkpoint/async_checkpoint.h), or
  // null for synchronous saves (the block off).
  AsyncCheckpointer* async_saver() {
    if (!config().checkpoint.writer.decoupled) return nullptr;
    if (!async_) async_ = std::make_unique<AsyncCheckpointer>(engine());
    return async_.get();
  }

 private:
  // Before training_: the model's split layers call into these groups until the engine is gone.
  std::shared_ptr<ModelParallelGroups> groups_;
  Training training_;
  std::vector<std::string> units_;
  std::vector<UnitHooks*> hooks_;
  // Declared after training_: destroyed first, while the engine it reads still exists.
  std::unique_ptr<AsyncCheckpointer> async_;
};

// zerotorch.zero.GatheredParameters' scope: every parameter full until close().
class GatheredScope {
 public:
  GatheredScope(PyEngine& e, bool write_back)
      : scope_(std::make_unique<Engine::GatheredParameters>(e.engine(), write_back)) {}
  void close() { scope_.reset(); }

 private:
  std::unique_ptr<Engine::GatheredParameters> scope_;
};

}  // namespace

void bind_engine(py::module_& m) {
  py::class_<GatheredScope>(m, "GatheredScope")
      .def("close", &GatheredScope::close, py::call_guard<py::gil_scoped_release>());
  py::class_<PyEngine>(m, "Engine")
      .def(py::init<const py::object&, const std::string&, const std::string&,
                    const std::vector<std::string>&, const py::dict&, const py::object&,
                    const std::string&, const py::object&, const py::object&, const py::object&>(),
           py::arg("module"), py::arg("config_path"), py::arg("config_text"), py::arg("overrides"),
           py::arg("program"), py::arg("units"), py::arg("device") = "",
           py::arg("split") = py::none(), py::arg("materialise") = py::none(),
           py::arg("lr_schedule") = py::none())
      .def_property_readonly("model_parallel", &PyEngine::groups)
      // The tensor split's parameters by name, with the dimension each is cut along.
      .def_property_readonly("tensor_split_params",
                             [](PyEngine& e) { return e.engine().options().tensor_split_params; })
      .def_property_readonly("dealt_names", [](PyEngine& e) { return e.engine().dealt_names(); })
      .def_property_readonly("gathers_units", &PyEngine::gathers_units)
      .def_property_readonly("units", &PyEngine::units)
      // A unit's forward pre- and post-hook (stage 3): gather (and prefetch), then release and
      // hook the outputs' gradients to gather it again for backward. Gathers are collectives.
      .def(
          "unit_before_forward", [](PyEngine& e, size_t i) { e.unit(i).before_forward(); },
          py::arg("unit"), py::call_guard<py::gil_scoped_release>())
      .def(
          "unit_before_routed_forward",
          [](PyEngine& e, size_t i, const at::Tensor& rows) {
            e.unit(i).before_routed_forward(rows);
          },
          py::arg("unit"), py::arg("rows"), py::call_guard<py::gil_scoped_release>())
      .def(
          "unit_after_forward",
          [](PyEngine& e, size_t i, const std::vector<at::Tensor>& outputs) {
            e.unit(i).after_forward(outputs);
          },
          py::arg("unit"), py::arg("outputs"), py::call_guard<py::gil_scoped_release>())
      .def(
          "gathered",
          [](PyEngine& e, bool write_back) {
            return std::make_unique<GatheredScope>(e, write_back);
          },
          py::arg("write_back"), py::call_guard<py::gil_scoped_release>())
      .def(
          "broadcast",
          [](PyEngine& e, const at::Tensor& t, int root) {
            // A fresh TensorImpl over the same storage: the communicator's thread may drop the
            // last reference to what it was given later, which must then not be a tensor owned
            // by a Python object (freeing that takes the GIL, held by whatever runs then).
            // (alias() or a view would keep the Python tensor as its base.)
            at::Tensor alias = at::empty({0}, t.options());
            {
              at::NoGradGuard no_grad;
              alias.set_(t.storage(), t.storage_offset(), t.sizes(), t.strides());
            }
            e.engine().communicator().broadcast(alias, root)->wait();
          },
          py::arg("tensor"), py::arg("root"), py::call_guard<py::gil_scoped_release>())
      .def(
          "barrier",
          // Every rank: under tensor parallelism the engine's communicator is only this tensor
          // index's ranks, and a file rank 0 writes is read by all of them.
          [](PyEngine& e) { e.engine().topology().all->barrier()->wait(); },
          py::call_guard<py::gil_scoped_release>())
      .def(
          "save_16bit_model",
          [](PyEngine& e, const std::string& path) { return save_16bit_model(e.engine(), path); },
          py::arg("path"), py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("stage",
                             [](PyEngine& e) { return e.config().zero_optimization.stage; })
      // fn runs the Python forward; the tensor it returns decides, at stage 3, whether a backward
      // follows.
      .def(
          "forward",
          [](PyEngine& e, const std::function<at::Tensor()>& fn) { return e.engine().forward(fn); },
          py::arg("fn"))
      // The backward may run Python autograd functions (checkpointing) on other threads.
      .def(
          "backward",
          [](PyEngine& e, const at::Tensor& loss, bool scale_wrt_gas) {
            e.engine().backward(loss, scale_wrt_gas);
          },
          py::arg("loss"), py::arg("scale_wrt_gas") = true,
          py::call_guard<py::gil_scoped_release>())
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
      // flops_profiler enabled: the last optimizer step's counts on this rank; else None.
      .def_property_readonly("step_flops",
                             [](PyEngine& e) -> py::object {
                               const profile::StepFlops* f = e.engine().step_flops();
                               if (f == nullptr) return py::none();
                               py::dict d;
                               d["step"] = f->step;
                               d["model_flops"] = f->flops.model();
                               d["hardware_flops"] = f->flops.hardware();
                               d["other_flops"] = f->flops.other;
                               d["seconds"] = f->seconds;
                               d["tflops"] = f->tflops();
                               d["mfu"] = f->peak_tflops > 0 ? py::cast(f->mfu()) : py::none();
                               return d;
                             })
      .def_property_readonly("gather_traffic",
                             [](PyEngine& e) {
                               const GatherTraffic t = e.engine().gather_traffic();
                               py::dict d;
                               d["gathered_bytes"] = t.gathered_bytes;
                               d["unrouted_bytes"] = t.unrouted_bytes;
                               return d;
                             })
      .def_property_readonly("rank", &PyEngine::rank)
      .def_property_readonly("world_size", &PyEngine::world_size)
      .def_property_readonly("gradient_accumulation_steps",
                             [](PyEngine& e) { return e.config().gradient_accumulation_steps; })
      .def_property_readonly("train_micro_batch_size_per_gpu",
                             [](PyEngine& e) { return e.config().train_micro_batch_size_per_gpu; })
      // The resolved config's values the Python layer acts on, typed (config_json is the whole
      // config for people to read).
      .def_property_readonly("seed", [](PyEngine& e) { return e.config().seed; })
      .def_property_readonly("data_drop_last",
                             [](PyEngine& e) { return e.config().data.drop_last; })
      .def_property_readonly(
          "gather_16bit_weights_on_model_save",
          [](PyEngine& e) {
            return e.config().zero_optimization.stage3_gather_16bit_weights_on_model_save;
          })
      .def_property_readonly("activation_checkpointing_keys_set",
                             [](PyEngine& e) {
                               // The block's keys that configure the C++ library's checkpoint.
                               const auto& ac = e.config().activation_checkpointing;
                               std::vector<std::string> set;
                               if (ac.number_checkpoints) set.push_back("number_checkpoints");
                               if (ac.cpu_checkpointing) set.push_back("cpu_checkpointing");
                               return set;
                             })
      .def_property_readonly("config_json", [](PyEngine& e) { return e.config().to_json(); })
      .def_property_readonly(
          "memory_plan",
          [](PyEngine& e) {
            // core/plan/memory_plan.h: bytes per place at its peak, the
            // parts alive there, the notes.
            const plan::MemoryPlan& p = e.memory_plan();
            py::dict d;
            py::list parts;
            for (const plan::PlanPart& part : p.parts) {
              parts.append(py::make_tuple(part.name, plan::to_string(part.place), part.bytes));
            }
            for (int i = 0; i < plan::kPlaces; ++i) {
              d[py::str(plan::to_string(plan::Place(i)))] = p.peak[static_cast<size_t>(i)];
            }
            d["parts"] = parts;
            d["device_peak_at"] = p.device_peak_at;
            d["notes"] = p.notes;
            return d;
          })
      .def(
          "save_checkpoint",
          [](PyEngine& e, const std::string& dir, const std::string& tag,
             const std::map<std::string, std::string>& client) {
            CheckpointOptions o;
            o.config_json = e.config().to_json(false);
            o.keep_last = e.config().checkpoint.keep_last;
            if (AsyncCheckpointer* a = e.async_saver()) {
              a->save(dir, tag, client, o);
            } else {
              save_checkpoint(e.engine(), dir, tag, client, o);
            }
          },
          py::arg("dir"), py::arg("tag"), py::arg("client_state"),
          py::call_guard<py::gil_scoped_release>())
      // Background saves: commit the one in flight once every rank has written it (collective,
      // called after every step), or wait for it and commit.
      .def(
          "commit_checkpoint",
          [](PyEngine& e) {
            AsyncCheckpointer* a = e.async_saver();
            return a != nullptr && a->poll();
          },
          py::call_guard<py::gil_scoped_release>())
      .def(
          "wait_checkpoint",
          [](PyEngine& e) {
            if (AsyncCheckpointer* a = e.async_saver()) a->wait();
          },
          py::call_guard<py::gil_scoped_release>())
      .def(
          "load_checkpoint",
          [](PyEngine& e, const std::string& dir, const std::string& tag) {
            if (AsyncCheckpointer* a = e.async_saver()) a->wait();
            return load_checkpoint(e.engine(), dir, tag);
          },
          py::arg("dir"), py::arg("tag"), py::call_guard<py::gil_scoped_release>());
}

}  // namespace zt::python
