#include "testdevice/device_check.h"

#include <array>
#include <string_view>

#include <c10/util/Exception.h>

namespace zt::testdevice {
namespace {

// The ops whose `indices` may stay on the host (device_check.h).
constexpr std::array<std::string_view, 6> kHostIndexOps = {
    "aten::index",         "aten::index_put_",       "aten::index_put", "aten::_index_put_impl_",
    "aten::_unsafe_index", "aten::_unsafe_index_put"};

bool takes_host_indices(const c10::FunctionSchema& schema) {
  for (std::string_view name : kHostIndexOps) {
    if (schema.name() == name) {
      return true;
    }
  }
  return false;
}

class DeviceCheck {
 public:
  explicit DeviceCheck(const c10::FunctionSchema& schema)
      : schema_(schema), host_indices_(takes_host_indices(schema)) {}

  void visit(const at::Tensor& t, const c10::Argument& arg) {
    if (!t.defined()) {
      return;
    }
    const bool host = t.device().is_cpu();
    if (host && (t.dim() == 0 || (host_indices_ && arg.name() == "indices"))) {
      return;
    }
    if (!device_) {
      device_ = t.device();
      return;
    }
    TORCH_CHECK(t.device() == *device_,
                "Expected all tensors to be on the same device, but found at least two devices, ",
                *device_, " and ", t.device(), "! (argument '", arg.name(), "' of ",
                schema_.operator_name(), ")");
  }

  void visit(const c10::IValue& value, const c10::Argument& arg) {
    if (value.isTensor()) {
      visit(value.toTensor(), arg);
    } else if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorVector()) {
        visit(t, arg);
      }
    } else if (value.isOptionalTensorList()) {
      for (const std::optional<at::Tensor>& t : value.toOptionalTensorVector()) {
        if (t.has_value()) {
          visit(*t, arg);
        }
      }
    } else if (value.isDevice() && !device_argument_) {
      device_argument_ = value.toDevice();
    }
  }

  std::optional<c10::Device> device() const { return device_ ? device_ : device_argument_; }

 private:
  const c10::FunctionSchema& schema_;
  const bool host_indices_;
  std::optional<c10::Device> device_;
  std::optional<c10::Device> device_argument_;
};

}  // namespace

std::optional<c10::Device> common_device(const c10::OperatorHandle& op,
                                         const torch::jit::Stack& stack) {
  const c10::FunctionSchema& schema = op.schema();
  const auto& args = schema.arguments();
  const size_t first = stack.size() - args.size();
  DeviceCheck check(schema);
  for (size_t i = 0; i < args.size(); ++i) {
    check.visit(stack[first + i], args[i]);
  }
  return check.device();
}

}  // namespace zt::testdevice
