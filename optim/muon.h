#pragma once
// Muon with an auxiliary AdamW on a flat shard: DeepSpeed's MuonWithAuxAdam
// (deepspeed/runtime/zero/muon/original_muon.py, as its ZeRO optimizers drive it).
//
// Which parameters Muon steps (uses_muon, DeepSpeed's set_optimizer_flags): every parameter of 2
// or more dimensions whose name, lowercased, contains neither "embed" nor "lm_head". The others
// (embeddings, the output head, norms, biases) step with the auxiliary Adam.
//
// A Muon parameter's update, on the whole matrix G (the gradient averaged over ranks, unscaled):
//   m = lerp(m, G, 1 - momentum)                      // momentum buffer
//   U = lerp(G, m, momentum)                          // Nesterov blend (always on in DeepSpeed)
//   O = orthogonalize(U, 5 steps) * sqrt(max(1, rows / cols))
//   p *= 1 - lr wd;  p -= lr O
// orthogonalize is the quintic Newton-Schulz iteration, a, b, c = 3.4445, -4.7750, 2.0315, on
// X = U / (||U||_F + 1e-7), transposed so that rows <= cols; kGram (DeepSpeed's default) iterates
// on the Gram matrix X X^T with a restart at step 2, kStandard on X. Compute dtype as DeepSpeed's
// ns_compute_dtype: Gram in fp16 where the device has fp16 matrix products (CUDA; a CPU whose
// oneDNN reports fp16), else fp32; standard in bf16; ZT_MUON_NS_DTYPE pins one (base/env_vars.h).
// A 4-D (convolution) weight is viewed as
// (out, in * kh * kw); other shapes batch over their leading dimensions.
//
// In a ZeRO step the orthogonalised update replaces the gradient before the gradient norm, so the
// norm and gradient_clipping cover O (DeepSpeed's stages 1-3 and CPU offload do the same). The
// shard optimizer therefore sees, in its Muon ranges (GroupHyper::muon), O itself as the
// "gradient", and applies only the weight decay and the step; the momentum half runs before, in
// fold_momentum, because orthogonalize needs the whole matrix and the shard holds a slice of it
// (core/zero/sharded_step.h gathers it).
//
// Auxiliary Adam (DeepSpeed's inline adam_update; GroupHyper beta1, beta2, eps, its own lr):
//   g += wd p  (adamw_mode false only)
//   m = lerp(m, g, 1 - b1);  v = lerp(v, g^2, 1 - b2)
//   p *= 1 - lr wd  (adamw_mode only);  p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
//
// State (flat fp32, laid out like master, 8 bytes per element as Adam's): "exp_avg" holds Adam's
// first moment in Adam ranges and Muon's momentum buffer in Muon ranges; "exp_avg_sq" Adam's
// second moment (zero in Muon ranges).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "optim/muon_spec.h"
#include "optim/shard_optimizer.h"

namespace zt::optim {

// "gram" or "standard" (DeepSpeed's ns_method); a zt::Error naming the key otherwise.
NsMethod ns_method_from_name(const std::string& name);
const char* ns_method_name(NsMethod method);

inline constexpr int kMuonNsSteps = 5;  // DeepSpeed's muon_update default; not configurable there
inline constexpr double kNsA = 3.4445, kNsB = -4.7750, kNsC = 2.0315;

// True when DeepSpeed's Muon steps a parameter with this name and shape.
bool uses_muon(const std::string& name, at::IntArrayRef shape);

// The dtype orthogonalize iterates in, for a matrix on `device` (see the file comment).
at::ScalarType ns_compute_dtype(NsMethod method, const c10::Device& device);

// O = the Newton-Schulz orthogonalisation of u (>= 2-D), times the aspect-ratio scale, in u's
// dtype and shape. compute overrides the iteration's dtype (tests); unset: ns_compute_dtype.
at::Tensor orthogonalize(const at::Tensor& u, NsMethod method, int steps = kMuonNsSteps,
                         std::optional<at::ScalarType> compute = std::nullopt);

class Muon : public ShardOptimizer {
 public:
  explicit Muon(const OptimizerSpec& spec);

  // Muon's first half on elements [begin, end) of the shard: m = lerp(m, g, 1 - momentum), then
  // g = lerp(g, m, momentum) in place (the Nesterov blend orthogonalize takes). g is the
  // unscaled averaged gradient of those elements, on any device (it is moved to the state's).
  // Allocates the state on `state_device` at the first call.
  void fold_momentum(at::Tensor g, int64_t shard_numel, int64_t begin, double momentum,
                     const c10::Device& state_device);

  // Muon ranges (hyper.muon): grad holds O; p *= 1 - lr wd; p -= lr grad_scale O. Other ranges:
  // the auxiliary Adam.
  void step(at::Tensor& master, const at::Tensor& grad, const std::vector<GroupRange>& groups,
            at::Tensor* half_out = nullptr) override;
  void init(int64_t numel, const at::TensorOptions& options) override;
  int64_t state_bytes() const override;
  std::map<std::string, at::Tensor> state_dict() const override;
  void load_state_dict(const std::map<std::string, at::Tensor>& state) override;
  std::string name() const override { return "Muon"; }

 private:
  bool adamw_mode_;
  at::Tensor exp_avg_, exp_avg_sq_;  // flat fp32, numel of master
};

}  // namespace zt::optim
