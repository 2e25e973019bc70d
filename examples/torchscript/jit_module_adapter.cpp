#include "examples/torchscript/jit_module_adapter.h"

#include "base/error.h"

namespace zt::examples {
namespace {

// Registers the direct parameters and buffers of `jit` on `holder`, and one holder per child.
void mirror(torch::nn::Module& holder, const torch::jit::Module& jit) {
  for (const auto& p : jit.named_parameters(/*recurse=*/false)) {
    holder.register_parameter(p.name, p.value, p.value.requires_grad());
  }
  for (const auto& b : jit.named_buffers(/*recurse=*/false)) {
    holder.register_buffer(b.name, b.value);
  }
  for (const auto& c : jit.named_children()) {
    auto child = std::make_shared<torch::nn::Module>(c.name);
    mirror(*child, c.value);
    holder.register_module(c.name, child);
  }
}

}  // namespace

JitModuleAdapterImpl::JitModuleAdapterImpl(torch::jit::Module module)
    : torch::nn::Module("JitModuleAdapter"), module_(std::move(module)) {
  mirror(*this, module_);
  // The mirror holds the jit module's own tensors: check, so a LibTorch change that made
  // named_parameters() return copies would fail here and not silently train a detached copy.
  auto mine = named_parameters(/*recurse=*/true);
  for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
    const torch::Tensor* t = mine.find(p.name);
    ZT_CHECK(t != nullptr && t->unsafeGetTensorImpl() == p.value.unsafeGetTensorImpl(),
             "jit adapter: parameter ", p.name, " is not shared with the TorchScript module");
  }
  train(module_.is_training());
}

torch::Tensor JitModuleAdapterImpl::call(const std::string& method,
                                         std::vector<c10::IValue> inputs) {
  auto m = module_.find_method(method);
  ZT_CHECK(m.has_value(), "TorchScript module has no method '", method,
           "' (export it with @torch.jit.export)");
  c10::IValue out = (*m)(std::move(inputs));
  ZT_CHECK(out.isTensor(), "TorchScript method '", method, "' returned ", out.tagKind(),
           ", not a tensor");
  return out.toTensor();
}

void JitModuleAdapterImpl::train(bool on) {
  torch::nn::Module::train(on);
  module_.train(on);
}

}  // namespace zt::examples
