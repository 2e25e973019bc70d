#pragma once
// The floating-point operations of one ATen op, from its name and its inputs' shapes: the
// formulas the FLOPs profiler (core/profile/flop_counter.h) applies to every op a step runs.
//
// Conventions (those of PyTorch's torch/utils/flop_counter.py for matrix products and attention,
// and of DeepSpeed's flops profiler for elementwise work):
//   - a multiply-accumulate is 2 flops; mm (m,k)x(k,n) is 2mkn, bmm adds the batch, and the
//     bias of addmm/baddbmm is not counted;
//   - scaled-dot-product attention (q (b,h,s,d), k/v (b,h_kv,t,d)) is 4 b h s t d forward, the
//     two products QK^T and PV at full (not causal-halved) size; its backward is the four
//     products of the gradient, 8 b h s t d, plus the QK^T that fused kernels recompute, which
//     is counted apart as recomputation (hardware work, not model work);
//   - elementwise ops and reductions: a per-element cost times the elements of the broadcast
//     inputs (1 for arithmetic and activations, 5 for layer norm as DeepSpeed estimates it);
//   - every other op (copies, views, indexing, embedding lookups, communication) is 0.
// Composite ops (linear, matmul, mv, scaled_dot_product_attention itself) are not in the table:
// the kernels they call are. An op in the table that calls another (mul with a scalar calls mul
// with a tensor, mean may call sum) is counted once by the counter, which skips ops nested in a
// counted one.

#include <string_view>

#include <ATen/core/ivalue.h>
#include <c10/util/ArrayRef.h>

namespace zt::profile {

struct OpFlops {
  double matmul = 0;     // matrix products and attention: the work tensor cores do
  double other = 0;      // elementwise and reductions
  double recompute = 0;  // attention backward's recomputed QK^T
  bool counted() const { return matmul > 0 || other > 0 || recompute > 0; }
};

// `name` as RecordFunction reports it ("aten::mm"); `inputs` the op's arguments.
OpFlops op_flops(std::string_view name, c10::ArrayRef<const c10::IValue> inputs);

}  // namespace zt::profile
