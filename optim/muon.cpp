#include "optim/muon.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include "base/env_vars.h"
#include "base/error.h"

namespace zt::optim {

NsMethod ns_method_from_name(const std::string& name) {
  if (name == "gram") return NsMethod::kGram;
  if (name == "standard") return NsMethod::kStandard;
  ZT_THROW("optimizer.params.ns_method must be \"gram\" or \"standard\", got \"", name, "\"");
}

const char* ns_method_name(NsMethod method) {
  return method == NsMethod::kGram ? "gram" : "standard";
}

bool uses_muon(const std::string& name, at::IntArrayRef shape) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return shape.size() >= 2 && lower.find("embed") == std::string::npos &&
         lower.find("lm_head") == std::string::npos;
}

namespace {

// DeepSpeed's CPU accelerator asks oneDNN (torch.ops.mkldnn._is_mkldnn_fp16_supported); the op
// is LibTorch's own, so the answer is the same one.
bool cpu_has_fp16_matmul() {
  static const bool yes = [] {
    try {
      auto op = c10::Dispatcher::singleton()
                    .findSchemaOrThrow("mkldnn::_is_mkldnn_fp16_supported", "")
                    .typed<bool()>();
      return op.call();
    } catch (const std::exception&) {
      return false;
    }
  }();
  return yes;
}

// sqrt(rows / cols) for a tall matrix, 1 otherwise (DeepSpeed's _aspect_ratio_scale).
double aspect_ratio_scale(int64_t rows, int64_t cols) {
  return rows > cols ? std::sqrt(static_cast<double>(rows) / static_cast<double>(cols)) : 1.0;
}

// The quintic iteration on X itself: A = X X^T; B = b A + (c A) A; X = a X + B X. The operand
// order is DeepSpeed's (Python's `c * A @ A` is (c * A) @ A), so the rounding is the same.
at::Tensor standard_iterations(at::Tensor x, int steps) {
  for (int i = 0; i < steps; ++i) {
    at::Tensor a = at::matmul(x, x.mT());
    at::Tensor b = kNsB * a + at::matmul(kNsC * a, a);
    x = kNsA * x + at::matmul(b, x);
  }
  return x;
}

// DeepSpeed's zeropower_via_newtonschulz5: the cast first, then the normalisation in the
// compute dtype.
at::Tensor newton_schulz_standard(const at::Tensor& g, int steps, at::ScalarType compute) {
  const bool tall = g.size(-2) > g.size(-1);
  at::Tensor x = g.to(compute);
  if (tall) x = x.mT();
  x = x / (at::linalg_vector_norm(x, 2, at::IntArrayRef({-2, -1}), /*keepdim=*/true) + 1e-7);
  x = standard_iterations(x, steps);
  return tall ? x.mT() : x;
}

// DeepSpeed's zeropower_via_gram_newtonschulz: normalised in fp32 (or the input's wider dtype),
// then cast; a square matrix takes the standard iteration; a wide one iterates on R = X X^T,
// accumulating the polynomial in Q and restarting from X = Q X at step 2.
at::Tensor newton_schulz_gram(const at::Tensor& g, int steps, at::ScalarType compute) {
  const bool tall = g.size(-2) > g.size(-1);
  const at::ScalarType norm_dtype = g.scalar_type() == at::kHalf ? at::kFloat : g.scalar_type();
  at::Tensor x = g.to(norm_dtype);
  if (tall) x = x.mT();
  const int64_t n = x.size(-2), m = x.size(-1);
  x = (x / (at::linalg_vector_norm(x, 2, at::IntArrayRef({-2, -1}), /*keepdim=*/true) + 1e-7))
          .to(compute);
  if (m <= n) {
    x = standard_iterations(x, steps);
    return tall ? x.mT() : x;
  }
  constexpr int kRestartAt = 2;
  at::Tensor r = at::matmul(x, x.mT());
  at::Tensor q;
  for (int i = 0; i < steps; ++i) {
    if (i == kRestartAt) {
      x = at::matmul(q, x);
      r = at::matmul(x, x.mT());
      q = at::Tensor();
    }
    at::Tensor z = kNsB * r + at::matmul(kNsC * r, r);
    if (!q.defined()) {
      q = z.clone();
      q.diagonal(0, -2, -1).add_(kNsA);
    } else {
      q = kNsA * q + at::matmul(z, q);
    }
    if (i < steps - 1 && i + 1 != kRestartAt) {
      at::Tensor rz = kNsA * r + at::matmul(z, r);
      r = kNsA * rz + at::matmul(z, rz);
    }
  }
  return tall ? at::matmul(x.mT(), q.mT()) : at::matmul(q, x);
}

}  // namespace

at::ScalarType ns_compute_dtype(NsMethod method, const c10::Device& device) {
  const char* pinned = ::zt::env::get(env::kMuonNsDtype);
  const std::string pin = pinned != nullptr ? pinned : "";
  if (!pin.empty() && pin != "auto") {
    if (pin == "fp32") return at::kFloat;
    if (pin == "fp16") return at::kHalf;
    if (pin == "bf16") return at::kBFloat16;
    ZT_CHECK(false, env::kMuonNsDtype, " must be auto, fp32, fp16 or bf16, got '", pin, "'");
  }
  if (method == NsMethod::kStandard) return at::kBFloat16;
  if (device.is_cuda()) return at::kHalf;
  return cpu_has_fp16_matmul() ? at::kHalf : at::kFloat;
}

at::Tensor orthogonalize(const at::Tensor& u, NsMethod method, int steps,
                         std::optional<at::ScalarType> compute) {
  ZT_CHECK(u.dim() >= 2, "Muon: orthogonalize needs a matrix, got ", u.dim(), " dimension(s)");
  const at::ScalarType dtype = compute ? *compute : ns_compute_dtype(method, u.device());
  // A convolution filter (out, in, kh, kw) is one (out, in * kh * kw) matrix, as DeepSpeed views
  // it; the aspect ratio still reads the last two dimensions, as DeepSpeed's does.
  const at::Tensor m = u.dim() == 4 ? u.reshape({u.size(0), -1}) : u;
  at::Tensor o = method == NsMethod::kGram ? newton_schulz_gram(m, steps, dtype)
                                           : newton_schulz_standard(m, steps, dtype);
  o = o * aspect_ratio_scale(u.size(-2), u.size(-1));
  return o.to(u.scalar_type()).reshape(u.sizes());
}

Muon::Muon(const OptimizerSpec& spec) : adamw_mode_(spec.adamw_mode) {}

void Muon::init(int64_t numel, const at::TensorOptions& options) {
  exp_avg_ = at::zeros({numel}, options.dtype(at::kFloat));
  exp_avg_sq_ = at::zeros({numel}, options.dtype(at::kFloat));
}

void Muon::fold_momentum(at::Tensor g, int64_t shard_numel, int64_t begin, double momentum,
                         const c10::Device& state_device) {
  if (!exp_avg_.defined()) init(shard_numel, at::TensorOptions().device(state_device));
  ZT_CHECK(exp_avg_.numel() == shard_numel, "Muon: state has ", exp_avg_.numel(),
           " elements but the shard ", shard_numel);
  at::Tensor m = exp_avg_.narrow(0, begin, g.numel());
  at::Tensor here = g.device() == m.device() ? g : g.to(m.device());
  m.lerp_(here, 1 - momentum);
  here.lerp_(m, momentum);
  if (!here.is_same(g)) g.copy_(here);
}

void Muon::step(at::Tensor& master, const at::Tensor& grad, const std::vector<GroupRange>& groups,
                at::Tensor* half_out) {
  check_step_args(master, grad, groups, half_out);
  if (!exp_avg_.defined()) init(master.numel(), master.options());
  ZT_CHECK(exp_avg_.numel() == master.numel(), "Muon: state has ", exp_avg_.numel(),
           " elements but master ", master.numel());
  ++step_count_;
  const double t = static_cast<double>(step_count_);
  for (const GroupRange& g : groups) {
    const int64_t n = g.end - g.begin;
    if (n == 0) continue;
    const GroupHyper& h = g.hyper;
    at::Tensor p = master.narrow(0, g.begin, n);
    at::Tensor d = scaled_grad(grad.narrow(0, g.begin, n), h.grad_scale);
    if (h.muon) {
      p.mul_(1 - h.lr * h.weight_decay);
      p.add_(d, -h.lr);
    } else {
      if (!adamw_mode_ && h.weight_decay != 0) d = d.add(p, h.weight_decay);
      at::Tensor m = exp_avg_.narrow(0, g.begin, n), v = exp_avg_sq_.narrow(0, g.begin, n);
      m.lerp_(d, 1 - h.beta1);
      v.lerp_(d.square(), 1 - h.beta2);
      at::Tensor mc = m / (1 - std::pow(h.beta1, t));
      at::Tensor vc = v / (1 - std::pow(h.beta2, t));
      at::Tensor update = mc / (vc.sqrt() + h.eps);
      if (adamw_mode_) p.mul_(1 - h.lr * h.weight_decay);
      p.add_(update, -h.lr);
    }
    if (half_out) half_out->narrow(0, g.begin, n).copy_(p);
  }
}

int64_t Muon::state_bytes() const {
  return exp_avg_.defined() ? (exp_avg_.numel() + exp_avg_sq_.numel()) * 4 : 0;
}

std::map<std::string, at::Tensor> Muon::state_dict() const {
  return moments_state_dict(exp_avg_, exp_avg_sq_);
}

void Muon::load_state_dict(const std::map<std::string, at::Tensor>& state) {
  load_moments_state_dict(state, &exp_avg_, &exp_avg_sq_);
}

}  // namespace zt::optim
