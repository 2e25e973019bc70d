#include "train/activation_probe.h"

#include <algorithm>
#include <memory>

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include "base/error.h"
#include "train/cpu_memory_meter.h"
#include "train/memory_peaks.h"

namespace zt::train {
namespace {

// Drops a parameter's gradient once accumulated, as the engine's bucket hook does.
class DropGrad final : public torch::autograd::PostAccumulateGradHook {
 public:
  void operator()(const at::Tensor& param) override {
    const_cast<at::Tensor&>(param).mutable_grad() = at::Tensor();
  }
};

}  // namespace

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
