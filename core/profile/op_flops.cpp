#include "core/profile/op_flops.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

namespace zt::profile {
namespace {

using Inputs = c10::ArrayRef<const c10::IValue>;

enum class Rule {
  kMm,            // (a, b)
  kAddmm,         // (bias, a, b)
  kBmm,           // (a, b)
  kBaddbmm,       // (bias, a, b); addbmm the same
  kAddmv,         // (bias, a, v)
  kDot,           // (a, b)
  kSdpa,          // (q, k, v, ...)
  kSdpaBackward,  // (grad_out, q, k, v, ...)
  kElementwise,
};

struct Formula {
  Rule rule;
  double per_element = 0;  // kElementwise only
};

// Keyed by the name without "aten::" and without an in-place "_" suffix.
const std::unordered_map<std::string, Formula>& formulas() {
  static const auto* table = [] {
    auto* t = new std::unordered_map<std::string, Formula>{
        {"mm", {Rule::kMm}},
        {"addmm", {Rule::kAddmm}},
        {"_addmm_activation", {Rule::kAddmm}},
        {"bmm", {Rule::kBmm}},
        {"baddbmm", {Rule::kBaddbmm}},
        {"addbmm", {Rule::kBaddbmm}},
        {"addmv", {Rule::kAddmv}},
        {"dot", {Rule::kDot}},
        {"vdot", {Rule::kDot}},
        // The fused kernels SDPA dispatches to; its math fallback runs bmm and softmax, which
        // are counted by their own rules.
        {"_scaled_dot_product_flash_attention_for_cpu", {Rule::kSdpa}},
        {"_scaled_dot_product_flash_attention", {Rule::kSdpa}},
        {"_scaled_dot_product_efficient_attention", {Rule::kSdpa}},
        {"_scaled_dot_product_cudnn_attention", {Rule::kSdpa}},
        {"_scaled_dot_product_flash_attention_for_cpu_backward", {Rule::kSdpaBackward}},
        {"_scaled_dot_product_flash_attention_backward", {Rule::kSdpaBackward}},
        {"_scaled_dot_product_efficient_attention_backward", {Rule::kSdpaBackward}},
        {"_scaled_dot_product_cudnn_attention_backward", {Rule::kSdpaBackward}},
    };
    for (const char* name : {"add",
                             "sub",
                             "rsub",
                             "mul",
                             "div",
                             "addcmul",
                             "addcdiv",
                             "pow",
                             "exp",
                             "log",
                             "sqrt",
                             "rsqrt",
                             "reciprocal",
                             "gelu",
                             "silu",
                             "relu",
                             "sigmoid",
                             "tanh",
                             "_softmax",
                             "_log_softmax",
                             "sum",
                             "mean",
                             "gelu_backward",
                             "silu_backward",
                             "sigmoid_backward",
                             "tanh_backward",
                             "threshold_backward",
                             "_softmax_backward_data",
                             "_log_softmax_backward_data"}) {
      t->emplace(name, Formula{Rule::kElementwise, 1});
    }
    t->emplace("native_layer_norm", Formula{Rule::kElementwise, 5});
    t->emplace("native_layer_norm_backward", Formula{Rule::kElementwise, 5});
    t->emplace("_fused_rms_norm", Formula{Rule::kElementwise, 4});
    t->emplace("_fused_rms_norm_backward", Formula{Rule::kElementwise, 4});
    return t;
  }();
  return *table;
}

// The sizes of tensor input i, or empty when it is not a defined tensor.
c10::IntArrayRef sizes_of(Inputs in, size_t i) {
  if (i >= in.size() || !in[i].isTensor()) return {};
  const at::Tensor& t = in[i].toTensor();
  if (!t.defined()) return {};
  return t.sizes();
}

double product(c10::IntArrayRef s) {
  double p = 1;
  for (int64_t v : s) p *= static_cast<double>(v);
  return p;
}

// Elements of the broadcast of every tensor input (a reduction's input size for sum/mean).
// Shapes that do not broadcast (ops whose tensors are not elementwise partners) count the
// largest input.
double broadcast_elements(Inputs in) {
  std::vector<int64_t> shape;
  double largest = 0;
  bool broadcasts = true;
  for (const c10::IValue& v : in) {
    if (!v.isTensor() || !v.toTensor().defined()) continue;
    const c10::IntArrayRef s = v.toTensor().sizes();
    largest = std::max(largest, product(s));
    if (s.size() > shape.size()) shape.insert(shape.begin(), s.size() - shape.size(), 1);
    const size_t offset = shape.size() - s.size();
    for (size_t d = 0; d < s.size(); ++d) {
      int64_t& have = shape[offset + d];
      if (have == s[d] || s[d] == 1) continue;
      if (have == 1) {
        have = s[d];
      } else {
        broadcasts = false;
      }
    }
  }
  return broadcasts ? product(shape) : largest;
}

// 2 m k n for a (..., m, k) x (..., k, n) product with `batch` leading products.
double product_flops(c10::IntArrayRef a, c10::IntArrayRef b) {
  if (a.size() < 2 || b.size() < 2) return 0;
  double batch = 1;
  for (size_t d = 0; d + 2 < a.size(); ++d) batch *= static_cast<double>(a[d]);
  return 2.0 * batch * static_cast<double>(a[a.size() - 2]) * static_cast<double>(a.back()) *
         static_cast<double>(b.back());
}

// q (b, h, s, d), k (b, h_kv, t, d), v (b, h_kv, t, dv): heads counted from q, as grouped-query
// attention computes every query head.
struct AttentionShape {
  double bhs = 0, t = 0, d = 0, dv = 0;
};

AttentionShape attention_shape(c10::IntArrayRef q, c10::IntArrayRef k, c10::IntArrayRef v) {
  if (q.size() != 4 || k.size() != 4 || v.size() != 4) return {};
  return {static_cast<double>(q[0]) * static_cast<double>(q[1]) * static_cast<double>(q[2]),
          static_cast<double>(k[2]), static_cast<double>(q[3]), static_cast<double>(v[3])};
}

}  // namespace

OpFlops op_flops(std::string_view name, Inputs in) {
  constexpr std::string_view kPrefix = "aten::";
  if (name.substr(0, kPrefix.size()) != kPrefix) return {};
  name.remove_prefix(kPrefix.size());
  if (name.size() > 1 && name.back() == '_' && name[name.size() - 2] != '_') {
    name.remove_suffix(1);  // in-place variant: add_ counts as add
  }
  const auto& table = formulas();
  const auto it = table.find(std::string(name));
  if (it == table.end()) return {};
  OpFlops f;
  switch (it->second.rule) {
    case Rule::kMm:
    case Rule::kBmm: f.matmul = product_flops(sizes_of(in, 0), sizes_of(in, 1)); break;
    case Rule::kAddmm:
    case Rule::kBaddbmm: f.matmul = product_flops(sizes_of(in, 1), sizes_of(in, 2)); break;
    case Rule::kAddmv: f.matmul = 2.0 * product(sizes_of(in, 1)); break;
    case Rule::kDot: f.matmul = 2.0 * product(sizes_of(in, 0)); break;
    case Rule::kSdpa: {
      const AttentionShape a = attention_shape(sizes_of(in, 0), sizes_of(in, 1), sizes_of(in, 2));
      f.matmul = 2.0 * a.bhs * a.t * (a.d + a.dv);  // QK^T, then PV
      break;
    }
    case Rule::kSdpaBackward: {
      const AttentionShape a = attention_shape(sizes_of(in, 1), sizes_of(in, 2), sizes_of(in, 3));
      // dP = dO V^T and dV = P^T dO (dv), dQ = dS K and dK = dS^T Q (d).
      f.matmul = 4.0 * a.bhs * a.t * (a.d + a.dv);
      f.recompute = 2.0 * a.bhs * a.t * a.d;
      break;
    }
    case Rule::kElementwise: f.other = it->second.per_element * broadcast_elements(in); break;
  }
  return f;
}

}  // namespace zt::profile
