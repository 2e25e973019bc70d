// Ops that run the host's CPU kernel on zttest although LibTorch offers the device another one:
// they have a CPU kernel and a CompositeExplicitAutograd kernel, a decomposition written for the
// backends without their own (native_layer_norm as var_mean and arithmetic, addr as mul and
// add). The decomposition rounds differently from the CPU kernel, and the device promises the
// host's results bit for bit; so each is registered here to the fallback, which runs the CPU
// kernel. tests/unit/testdevice/kernel_coverage_test.cpp lists LibTorch's ops of this kind and
// fails on one missing here. mse_loss as well: LibTorch gives the device a wrapper that calls
// mse_loss.out with a 0-dim result, whose CPU kernel then resizes it to the elementwise shape
// first and warns ("An output with one or more elements was resized") on every call.

#include <torch/library.h>

#include "testdevice/fallback.h"

namespace zt::testdevice {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* op :
       {"native_layer_norm", "native_group_norm", "addr", "addr.out", "_stack", "_stack.out",
        "any.dims", "any.dims_out", "all.dims", "all.dims_out", "linalg__powsum", "mse_loss"}) {
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&zttest_fallback>());
  }
}

}  // namespace zt::testdevice
