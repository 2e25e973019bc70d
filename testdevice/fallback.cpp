// The boxed fallback of the zttest device (TORCH_LIBRARY_IMPL(_, PrivateUse1)): every op without
// a zttest kernel runs on LibTorch's CPU kernel through at::native::cpu_fallback, which copies
// the tensor arguments to the host, runs the op there, copies the results to the device and
// copies mutated arguments (in-place ops, out=) back into the device tensors. Around that call it
// adds what a real device would enforce, in this order:
//
//   1. it refuses view ops (a return that aliases an argument, Tensor(a) in the schema): the CPU
//      result would be a copy, and a write through the "view" would miss the base. Such an op
//      needs a kernel (view_kernels.cpp).
//   2. it checks the arguments' devices as CUDA does (device_check.h).
//   3. it hands the CPU kernel the device's generator: a DeviceGenerator's host generator, or the
//      device's default one when none was passed; it refuses a CPU generator for a device op and
//      a device generator for a host op (generator.h).
//   4. it runs the copies queued on the op's stream first (stream_order.h): streams keep order.
//   5. after the call, it moves results that cpu_fallback left on the host to the op's device
//      (cpu_fallback takes the device of the first tensor argument, which may be a 0-dim host
//      scalar).
//
// Most ops reach it as their .out form: LibTorch runs a structured op's meta function (with
// TensorIterator's own device checks) on the device tensors, allocates the result there and calls
// the .out op, which lands here. Some ops are sent here by name although LibTorch has a
// decomposition for them (host_kernels.cpp).

#include "testdevice/fallback.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "testdevice/device_check.h"
#include "testdevice/device_guard.h"
#include "testdevice/generator.h"
#include "testdevice/stream_order.h"
#include "testdevice/test_device.h"

namespace zt::testdevice {
namespace {

void refuse_views(const c10::FunctionSchema& schema) {
  for (const c10::Argument& ret : schema.returns()) {
    const c10::AliasInfo* alias = ret.alias_info();
    TORCH_CHECK(alias == nullptr || alias->isWrite(), "zttest: view op ", schema.operator_name(),
                " has no kernel; the CPU fallback would copy it");
  }
}

bool is_optional_generator(const c10::Argument& arg) {
  const c10::TypePtr& type = arg.type();
  return type->kind() == c10::TypeKind::OptionalType &&
         type->expectRef<c10::OptionalType>().getElementType()->kind() ==
             c10::TypeKind::GeneratorType;
}

// Step 3 of the comment at the top, on the op's arguments in `stack`.
void use_device_generators(const c10::FunctionSchema& schema, std::optional<c10::Device> device,
                           torch::jit::Stack* stack) {
  const bool on_device = device && device->type() == kDeviceType;
  const auto& args = schema.arguments();
  const size_t first = stack->size() - args.size();
  for (size_t i = 0; i < args.size(); ++i) {
    c10::IValue& value = (*stack)[first + i];
    if (value.isGenerator() && value.toGenerator().defined()) {
      const at::Generator gen = value.toGenerator();
      auto* ours = dynamic_cast<DeviceGenerator*>(gen.unsafeGetGeneratorImpl());
      if (on_device) {
        TORCH_CHECK(ours != nullptr, "Expected a '", kBackendName,
                    "' device type for generator but found '", gen.device().type(), "'");
        value = c10::IValue(ours->host_generator());
      } else {
        TORCH_CHECK(ours == nullptr, "Expected a '", device ? device->type() : c10::DeviceType::CPU,
                    "' device type for generator but found '", kBackendName, "'");
      }
    } else if (value.isNone() && on_device && is_optional_generator(args[i])) {
      const auto& gen = default_generator(device->index());
      value = c10::IValue(
          static_cast<DeviceGenerator*>(gen.unsafeGetGeneratorImpl())->host_generator());
    }
  }
}

bool has_device_argument(const c10::FunctionSchema& schema, const torch::jit::Stack& stack) {
  const size_t first = stack.size() - schema.arguments().size();
  for (size_t i = first; i < stack.size(); ++i) {
    if (stack[i].isDevice()) {
      return true;
    }
  }
  return false;
}

// The returns cpu_fallback left on another device, moved to `device` (views were refused, and
// in-place returns are the device arguments themselves). Not for an op given a Device argument:
// cpu_fallback put its results there on purpose.
void move_returns(const c10::FunctionSchema& schema, const c10::Device& device,
                  torch::jit::Stack* stack) {
  const auto& returns = schema.returns();
  const size_t first = stack->size() - returns.size();
  for (size_t i = 0; i < returns.size(); ++i) {
    if (returns[i].alias_info() != nullptr) {
      continue;
    }
    c10::IValue& value = (*stack)[first + i];
    if (value.isTensor()) {
      const at::Tensor& t = value.toTensor();
      if (t.defined() && t.device() != device) {
        value = c10::IValue(t.to(device));
      }
    } else if (value.isTensorList()) {
      std::vector<at::Tensor> tensors = value.toTensorVector();
      bool moved = false;
      for (at::Tensor& t : tensors) {
        if (t.defined() && t.device() != device) {
          t = t.to(device);
          moved = true;
        }
      }
      if (moved) {
        value = c10::IValue(c10::List<at::Tensor>(tensors));
      }
    }
  }
}

}  // namespace

void zttest_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  refuse_views(schema);
  const std::optional<c10::Device> device = common_device(op, *stack);
  use_device_generators(schema, device, stack);
  const bool on_device = device && device->type() == kDeviceType;
  const bool move = on_device && !has_device_argument(schema, *stack);
  c10::OptionalDeviceGuard guard;
  if (on_device) {
    guard.reset_device(*device);
    complete(current_stream(device->index()));
  }
  at::native::cpu_fallback(op, stack);
  if (move) {
    move_returns(schema, *device, stack);
  }
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&zttest_fallback>());
}

}  // namespace zt::testdevice
