#include "core/activations/activation_checkpoint.h"

#include <atomic>
#include <mutex>
#include <utility>

#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/core/grad_mode.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "core/profile/flop_counter.h"

namespace zt {
namespace {

struct Settings {
  std::mutex mutex;
  ActivationCheckpointOptions options;
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> checkpointed{0};
};

Settings& settings() {
  static Settings* s = new Settings();  // never destroyed: a backward may run at exit
  return *s;
}

// The extra losses of the recompute running on this thread (null outside one).
thread_local std::vector<at::Tensor>* t_recompute_losses = nullptr;

// The function to recompute, kept alive by the autograd context until backward.
struct FnHolder : torch::CustomClassHolder {
  explicit FnHolder(CheckpointFn f) : fn(std::move(f)) {}
  CheckpointFn fn;
};

// The generators the wrapped call may draw from: the CPU one, and the device's of the first input
// on an accelerator (a GPU, or the test device).
std::vector<at::Generator> generators(at::TensorList inputs) {
  std::vector<at::Generator> gens = {at::detail::getDefaultCPUGenerator()};
  for (const at::Tensor& t : inputs) {
    if (t.defined() && !t.is_cpu()) {
      gens.push_back(at::globalContext().defaultGenerator(t.device()));
      break;
    }
  }
  return gens;
}

class Checkpoint : public torch::autograd::Function<Checkpoint> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::TensorList inputs,
                            c10::IValue holder, bool to_host) {
    std::vector<at::Generator> gens = generators(inputs);
    c10::List<at::Tensor> rng;
    for (auto& g : gens) rng.push_back(g.get_state());
    ctx->saved_data["rng"] = rng;
    ctx->saved_data["fn"] = holder;
    // What is kept: the inputs themselves, or (cpu_checkpointing) host copies of the device
    // ones, which go back to their device for the recompute.
    std::vector<at::Tensor> kept;
    c10::List<int64_t> devices, device_types;
    c10::List<bool> needs_grad;
    for (const at::Tensor& t : inputs) {
      const bool host_copy = to_host && t.defined() && !t.is_cpu();
      kept.push_back(host_copy ? t.to(at::kCPU) : t);
      devices.push_back(host_copy ? static_cast<int64_t>(t.device().index()) : -1);
      device_types.push_back(host_copy ? static_cast<int64_t>(t.device().type()) : -1);
      needs_grad.push_back(t.defined() && t.requires_grad());
    }
    ctx->saved_data["host_device"] = devices;
    ctx->saved_data["host_device_type"] = device_types;
    ctx->saved_data["needs_grad"] = needs_grad;
    ctx->save_for_backward(kept);
    auto* h = static_cast<FnHolder*>(holder.toCapsule().get());
    return h->fn(std::vector<at::Tensor>(inputs.begin(), inputs.end()));  // grad mode is off
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* h = static_cast<FnHolder*>(ctx->saved_data["fn"].toCapsule().get());
    const c10::List<int64_t> devices = ctx->saved_data["host_device"].toIntList();
    const c10::List<int64_t> device_types = ctx->saved_data["host_device_type"].toIntList();
    const c10::List<bool> needs_grad = ctx->saved_data["needs_grad"].toBoolList();
    std::vector<at::Tensor> inputs = ctx->get_saved_variables();
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].defined()) continue;
      at::Tensor t = inputs[i].detach();
      if (devices[i] >= 0) {
        t = t.to(at::Device(static_cast<c10::DeviceType>(device_types[i]),
                            static_cast<c10::DeviceIndex>(devices[i])));
      }
      inputs[i] = needs_grad[i] ? t.requires_grad_(true) : t;
    }
    std::vector<at::Generator> gens = generators(inputs);
    const c10::List<at::Tensor> rng = ctx->saved_data["rng"].toTensorList();
    std::vector<at::Tensor> now;
    for (size_t i = 0; i < gens.size() && i < rng.size(); ++i) {
      now.push_back(gens[i].get_state());
      gens[i].set_state(rng.get(i));
    }
    at::Tensor y;
    std::vector<at::Tensor> losses;
    {
      at::AutoGradMode grad_on(true);
      profile::RecomputeScope recompute;  // the FLOPs profiler counts this forward apart
      std::vector<at::Tensor>* outer = t_recompute_losses;  // (nested checkpoints)
      t_recompute_losses = &losses;
      try {
        y = h->fn(inputs);
      } catch (...) {
        t_recompute_losses = outer;
        throw;
      }
      t_recompute_losses = outer;
    }
    for (size_t i = 0; i < now.size(); ++i) gens[i].set_state(now[i]);
    // Parameter gradients accumulate through their AccumulateGrad nodes (and the engine's
    // hooks) inside this nested backward.
    torch::autograd::variable_list roots, root_grads;
    if (y.requires_grad()) {
      roots.push_back(y);
      root_grads.push_back(grads[0]);
    }
    for (const at::Tensor& l : losses) {
      if (!l.requires_grad()) continue;
      roots.push_back(l);
      root_grads.push_back(at::ones_like(l));
    }
    if (!roots.empty()) torch::autograd::backward(roots, root_grads);
    torch::autograd::variable_list out;
    for (size_t i = 0; i < inputs.size(); ++i) {
      out.push_back(needs_grad[i] ? inputs[i].grad() : at::Tensor());
    }
    out.emplace_back();  // the function
    out.emplace_back();  // to_host
    return out;
  }
};

}  // namespace

bool in_checkpoint_recompute() {
  return t_recompute_losses != nullptr;
}

void add_recompute_loss(const at::Tensor& scalar) {
  if (t_recompute_losses != nullptr) t_recompute_losses->push_back(scalar);
}

void configure_activation_checkpointing(const ActivationCheckpointOptions& options) {
  std::lock_guard<std::mutex> lock(settings().mutex);
  settings().options = options;
}

ActivationCheckpointOptions activation_checkpointing_options() {
  std::lock_guard<std::mutex> lock(settings().mutex);
  return settings().options;
}

void begin_checkpointed_forward() {
  settings().calls = 0;
  settings().checkpointed = 0;
}

CheckpointCounts checkpoint_counts() {
  return {settings().calls, settings().checkpointed};
}

at::Tensor checkpoint_activations(const CheckpointFn& fn, const std::vector<at::Tensor>& inputs) {
  // Without grad nothing is kept anyway; with no input requiring grad the output of a
  // reentrant checkpoint would carry none, and the wrapped parameters would get no gradient.
  bool any_grad = false;
  for (const at::Tensor& t : inputs) any_grad = any_grad || (t.defined() && t.requires_grad());
  if (!at::GradMode::is_enabled() || !any_grad) return fn(inputs);
  const ActivationCheckpointOptions o = activation_checkpointing_options();
  const int64_t call = settings().calls++;
  if (o.number_checkpoints && call >= *o.number_checkpoints) return fn(inputs);
  ++settings().checkpointed;
  // The autograd Function records every input's device and dtype, which an undefined tensor (an
  // absent mask) has none of: only the defined ones go through it, and the call sees the
  // undefined ones back in their places.
  std::vector<at::Tensor> defined;
  std::vector<size_t> slots;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].defined()) {
      defined.push_back(inputs[i]);
      slots.push_back(i);
    }
  }
  CheckpointFn wrapped = fn;
  if (defined.size() != inputs.size()) {
    wrapped = [fn, slots, n = inputs.size()](const std::vector<at::Tensor>& got) {
      std::vector<at::Tensor> all(n);
      for (size_t i = 0; i < slots.size(); ++i) all[slots[i]] = got[i];
      return fn(all);
    };
  }
  c10::IValue holder = c10::IValue::make_capsule(c10::make_intrusive<FnHolder>(std::move(wrapped)));
  return Checkpoint::apply(at::TensorList(defined), std::move(holder), o.cpu_checkpointing);
}

}  // namespace zt
