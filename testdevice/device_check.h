#pragma once
// The same-device rule of an op's arguments, as CUDA enforces it (TensorIterator and the codegen's
// device checks), for the ops zttest runs through the CPU fallback (fallback.cpp).
//
// Every tensor argument, in tensor lists and optional tensors too, outputs included, must be on
// one device, with CUDA's exceptions:
//   - a 0-dim CPU tensor (a scalar), anywhere;
//   - CPU tensors in the `indices` argument of the advanced-indexing ops aten::index,
//     index_put(_), _index_put_impl_, _unsafe_index and _unsafe_index_put: ATen moves the
//     indices to the tensor's device itself (make_info -> expandTensors(ensure_same_device) in
//     ATen/native/TensorAdvancedIndexingUtils.h). Their values must be on the device (or 0-dim).
//     Other ops that take indices (index_select, gather, scatter, embedding, index_add_...) check
//     that the indices are on the device, on CUDA and here.
// A violation throws c10::Error with CUDA's wording: "Expected all tensors to be on the same
// device, but found at least two devices, zttest:0 and cpu!", then which argument of which op.
// Structured elementwise ops (add, mul, where...) usually fail before reaching it, in
// TensorIterator's own check, with the same words.

#include <optional>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace zt::testdevice {

// The device of op's tensor arguments (the last arguments().size() entries of `stack`), or, when
// none is there but a Device argument is, that device; nullopt when neither. Throws on a mix.
std::optional<c10::Device> common_device(const c10::OperatorHandle& op,
                                         const torch::jit::Stack& stack);

}  // namespace zt::testdevice
