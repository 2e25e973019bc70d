#pragma once
// The zttest device's CPU fallback (fallback.cpp): the boxed kernel of every op without a kernel
// of its own, also registered by name for ops that must take it although LibTorch has another
// kernel for them (host_kernels.cpp).

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace zt::testdevice {

void zttest_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace zt::testdevice
