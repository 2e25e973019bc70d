#include "train/activation_probe.h"

#include <algorithm>
#include <memory>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include "base/error.h"
#include "train/cpu_memory_meter.h"
#include "train/memory_peaks.h"

namespace zt::train {

ProbeBatch probe_batch(const Config& c, int64_t max_positions, int64_t seq_multiple) {
  ProbeBatch b;
  const int64_t seq = std::min<int64_t>(c.data.max_length, max_positions);
  b.batch = c.data.max_tokens > 0 ? std::max<int64_t>(c.data.max_tokens / seq, 1)
                                  : std::max<int64_t>(c.train_micro_batch_size_per_gpu, 1);
  b.seq = (seq + seq_multiple - 1) / seq_multiple * seq_multiple;
  b.dtype = c.bf16.enabled ? at::kBFloat16 : c.fp16.enabled ? at::kHalf : at::kFloat;
  return b;
}
namespace {

// Drops a parameter's gradient once accumulated, as the engine's bucket hook does.
class DropGrad final : public torch::autograd::PostAccumulateGradHook {
 public:
  void operator()(const at::Tensor& param) override {
    const_cast<at::Tensor&>(param).mutable_grad() = at::Tensor();
  }
};

}  // namespace

namespace {

// The default generator of `device` (a handle sharing its state).
at::Generator default_generator(const c10::Device& device) {
  return device.is_cpu() ? at::detail::getDefaultCPUGenerator()
                         : at::globalContext().defaultGenerator(device);
}

at::Tensor state_of(const c10::Device& device) {
  at::Generator g = default_generator(device);
  const std::lock_guard<std::mutex> lock(g.mutex());
  return g.get_state();
}

void restore(const c10::Device& device, const at::Tensor& state) {
  at::Generator g = default_generator(device);
  const std::lock_guard<std::mutex> lock(g.mutex());
  g.set_state(state);
}

}  // namespace

KeepRandomState::KeepRandomState(const c10::Device& device) : device_(device) {
  cpu_ = state_of(c10::Device(c10::kCPU));
  if (!device.is_cpu()) other_ = state_of(device);
}

KeepRandomState::~KeepRandomState() {
  restore(c10::Device(c10::kCPU), cpu_);
  if (other_.defined()) restore(device_, other_);
}

plan::UnitActivations probe_activations(torch::nn::Module& unit,
                                        const std::function<at::Tensor()>& forward,
                                        const c10::Device& device) {
  std::unique_ptr<CpuMemoryMeter::Scope> meter;
  if (device.is_cpu()) meter = std::make_unique<CpuMemoryMeter::Scope>();
  std::vector<at::Tensor> params = unit.parameters();
  for (at::Tensor& p : params) {
    if (p.requires_grad()) {
      torch::autograd::impl::set_post_acc_grad_hooks(p, std::make_unique<DropGrad>());
    }
  }
  plan::UnitActivations act;
  const int64_t before = live_bytes(device);
  ZT_CHECK(before >= 0, "activation probe: no memory count for ", device.str());
  reset_memory_peaks(device);
  at::Tensor out = forward();
  const int64_t after_forward = live_bytes(device);
  act.saved = std::max<int64_t>(after_forward - before, 0);
  act.forward_extra = std::max<int64_t>(peak_bytes(device) - after_forward, 0);
  at::Tensor grad = at::ones_like(out);
  const int64_t level = live_bytes(device);
  reset_memory_peaks(device);
  out.backward(grad);
  act.backward_extra = std::max<int64_t>(peak_bytes(device) - level, 0);
  for (at::Tensor& p : params) {
    if (p.requires_grad()) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
  }
  return act;
}

}  // namespace zt::train
