// Which of LibTorch's ops the device covers with kernels of its own, checked over every op the
// dispatcher knows, so a new LibTorch that adds a view op or a CPU kernel beside a decomposition
// shows up here rather than as a silent copy or a last-bit difference.

#include <algorithm>
#include <string>
#include <vector>

#include <ATen/core/Reduction.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "device_fixture.h"

namespace zt::testdevice {
namespace {

class KernelCoverage : public DeviceTest {};

bool is_view(const c10::FunctionSchema& schema) {
  for (const c10::Argument& ret : schema.returns()) {
    if (ret.alias_info() != nullptr && !ret.alias_info()->isWrite()) {
      return true;
    }
  }
  return false;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) {
    out += " " + n;
  }
  return out;
}

// A view op that reaches the fallback is refused there (view_test.cpp); every other must have a
// zttest kernel (testdevice/view_kernels.cpp) or a composite one. Left out: the views of sparse
// and nested tensors, layouts the device does not have.
TEST_F(KernelCoverage, EveryViewOpOfStridedTensorsHasAKernel) {
  std::vector<std::string> uncovered;
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    const auto op = c10::Dispatcher::singleton().findOp(name);
    if (!op || !op->hasSchema() || name.name.rfind("aten::", 0) != 0 || !is_view(op->schema())) {
      continue;
    }
    bool covered = false;
    for (c10::DispatchKey key :
         {c10::DispatchKey::PrivateUse1, c10::DispatchKey::CompositeImplicitAutograd,
          c10::DispatchKey::CompositeExplicitAutograd,
          c10::DispatchKey::CompositeExplicitAutogradNonFunctional}) {
      covered = covered || op->hasKernelForDispatchKey(key);
    }
    if (!covered) {
      uncovered.push_back(c10::toString(name));
    }
  }
  std::sort(uncovered.begin(), uncovered.end());
  EXPECT_EQ(join(uncovered),
            " aten::_indices aten::_nested_get_values aten::_nested_view_from_buffer"
            " aten::_nested_view_from_jagged aten::_sparse_broadcast_to aten::_values");
}

// An op with a CPU kernel and a decomposition (CompositeExplicitAutograd) would run the
// decomposition on the device; testdevice/host_kernels.cpp sends it to the CPU kernel instead.
TEST_F(KernelCoverage, EveryOpWithACpuKernelRunsItOnTheDevice) {
  std::vector<std::string> decomposed;
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    const auto op = c10::Dispatcher::singleton().findOp(name);
    if (op && op->hasKernelForDispatchKey(c10::DispatchKey::CPU) &&
        op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
        !op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
      decomposed.push_back(c10::toString(name));
    }
  }
  EXPECT_TRUE(decomposed.empty()) << "add to testdevice/host_kernels.cpp:" << join(decomposed);
}

// Collects the warnings LibTorch raises while it is installed.
class Warnings : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override { messages.push_back(warning.msg()); }
  std::vector<std::string> messages;
};

// The regression losses the example programs train with: the device's value is the CPU kernel's,
// bit for bit, and computing it raises no warning (LibTorch's own wrapper for the device called
// the out= form, whose CPU kernel warned of a resized output on every call).
TEST_F(KernelCoverage, LossesEqualTheCpusWithoutWarnings) {
  torch::manual_seed(0);
  const at::Tensor input = torch::randn({16}), target = torch::randn({16});
  Warnings warnings;
  {
    c10::WarningUtils::WarningHandlerGuard guard(&warnings);
    for (int64_t reduction : {at::Reduction::Mean, at::Reduction::Sum, at::Reduction::None}) {
      const at::Tensor on_device = at::mse_loss(input.to(dev()), target.to(dev()), reduction);
      EXPECT_TRUE(torch::equal(on_device.cpu(), at::mse_loss(input, target, reduction)))
          << "reduction " << reduction;
    }
  }
  EXPECT_TRUE(warnings.messages.empty()) << warnings.messages.front();
}

}  // namespace
}  // namespace zt::testdevice
