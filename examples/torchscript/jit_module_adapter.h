#pragma once
// JitModuleAdapter: a TorchScript module (torch.jit.script in Python, torch::jit::load here) seen
// as the torch::nn::Module that zt::Engine takes.
//
// zt::Engine works on a torch::nn::Module's named_parameters() and buffers(): it rebinds each
// parameter's storage into its flat buffers (set_data, so the tensor object stays the same),
// shards and releases it at stage 3, and broadcasts buffers. A torch::jit::Module is a different
// class (its attributes live in an object of the TorchScript runtime), but its parameters are
// ordinary tensors. The adapter mirrors the jit module's hierarchy with plain nn::Modules and
// registers the very same tensors (no copies) under the same names:
//
//   jit: body.0.weight, body.0.bias, head.weight, scale (buffer)
//   adapter: named_parameters() = body.0.weight, body.0.bias, head.weight; buffers() = scale
//
// so whatever the engine does to a parameter, the jit module's methods see it, and saving the jit
// module (torch::jit::Module::save) writes the trained values. A parameter with
// requires_grad = False in Python is frozen for the engine too.
//
// Stage 3: the whole module is one unit (the engine's root unit): call its methods inside
// engine.forward(...), which gathers every parameter for forward and backward. Save inside
// Engine::GatheredParameters, where every parameter holds its full values.

#include <string>
#include <vector>

#include <torch/script.h>
#include <torch/torch.h>

namespace zt::examples {

class JitModuleAdapterImpl : public torch::nn::Module {
 public:
  explicit JitModuleAdapterImpl(torch::jit::Module module);

  // Runs a method of the jit module ("forward", or one marked @torch.jit.export) that returns a
  // tensor.
  torch::Tensor call(const std::string& method, std::vector<c10::IValue> inputs);
  // train()/eval() reach the jit module too (its `training` flags drive dropout and the like).
  void train(bool on = true) override;
  torch::jit::Module& jit() { return module_; }

 private:
  torch::jit::Module module_;
};
TORCH_MODULE(JitModuleAdapter);

}  // namespace zt::examples
