#include "core/ops/cross_entropy.h"

#include <atomic>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "base/cuda_plugin.h"
#include "base/error.h"
#include "core/ops/cross_entropy_launch.h"

namespace zt::ops {
namespace {

constexpr int64_t kIgnoreIndex = -100;

std::atomic<bool>& fused_enabled() {
  static std::atomic<bool> on{true};
  return on;
}

// The plugin's launcher, looked up once; nullptr in a build without the plugin or where it does
// not load.
CrossEntropyLauncher launcher() {
  static const CrossEntropyLauncher fn =
      reinterpret_cast<CrossEntropyLauncher>(cuda::find_symbol(kCrossEntropySymbol));
  return fn;
}

LogitsType logits_type(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return LogitsType::kHalf;
    case at::kBFloat16: return LogitsType::kBFloat16;
    default: return LogitsType::kFloat;
  }
}

void check_rows(const at::Tensor& logits, const at::Tensor& labels) {
  ZT_CHECK(logits.dim() == 2 && labels.dim() == 1 && labels.size(0) == logits.size(0),
           "token cross-entropy: logits (N, V) and labels (N) expected, got ", logits.sizes(),
           " and ", labels.sizes());
  ZT_CHECK(labels.scalar_type() == at::kLong, "token cross-entropy: labels must be int64, got ",
           labels.scalar_type());
}

// The kernel reads raw pointers: what LibTorch's ops would refuse (labels on another device) must
// be refused here, never read as device memory.
void check_same_device(const at::Tensor& logits, const at::Tensor& labels) {
  ZT_CHECK(labels.device() == logits.device(), "token cross-entropy: labels on ", labels.device(),
           ", logits on ", logits.device());
}

// Enqueues the kernel on the current stream of the logits' device (both contiguous).
void launch(const at::Tensor& logits, const at::Tensor& labels, float* loss, float* lse_out,
            const at::Tensor& grad, const float* grad_scale, const float* lse_in) {
  CrossEntropyLaunch l{};
  l.logits = logits.data_ptr();
  l.dtype = static_cast<int32_t>(logits_type(logits.scalar_type()));
  l.rows = logits.size(0);
  l.vocab = logits.size(1);
  l.row_stride = logits.stride(0);
  l.labels = labels.data_ptr<int64_t>();
  l.ignore_index = kIgnoreIndex;
  l.loss = loss;
  l.lse_out = lse_out;
  l.grad = grad.defined() ? grad.data_ptr() : nullptr;
  l.grad_scale = grad_scale;
  l.lse_in = lse_in;
  const char* err = launcher()(&l, nullptr);
  ZT_CHECK(err == nullptr, "fused cross-entropy kernel: ", err);
}

// Per-row losses (fp32) through the kernel; backward keeps the logits and one lse per row, and
// writes the gradient in one pass of the kernel.
struct FusedRows : torch::autograd::Function<FusedRows> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& labels) {
    at::Tensor loss = at::empty({logits.size(0)}, logits.options().dtype(at::kFloat));
    at::Tensor lse = at::empty_like(loss);
    launch(logits, labels, loss.data_ptr<float>(), lse.data_ptr<float>(), {}, nullptr, nullptr);
    ctx->save_for_backward({logits, labels, lse});
    return loss;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &logits = saved[0], &labels = saved[1], &lse = saved[2];
    const at::Tensor scale = grads[0].to(at::kFloat).contiguous();
    at::Tensor grad = at::empty(logits.sizes(), logits.options());
    launch(logits, labels, nullptr, nullptr, grad, scale.data_ptr<float>(), lse.data_ptr<float>());
    return {grad, at::Tensor()};
  }
};

}  // namespace

bool fused_cross_entropy(const at::Tensor& logits) {
  const at::ScalarType t = logits.scalar_type();
  return fused_enabled().load(std::memory_order_relaxed) && logits.is_cuda() &&
         (t == at::kFloat || t == at::kHalf || t == at::kBFloat16) && launcher() != nullptr;
}

void set_fused_kernels(bool on) {
  fused_enabled().store(on, std::memory_order_relaxed);
}

at::Tensor token_cross_entropy(const at::Tensor& logits, const at::Tensor& labels,
                               TokenReduction reduction) {
  check_rows(logits, labels);
  if (!fused_cross_entropy(logits)) {
    return at::cross_entropy_loss(
        logits.to(at::kFloat), labels, /*weight=*/{},
        reduction == TokenReduction::kMean ? at::Reduction::Mean : at::Reduction::Sum,
        kIgnoreIndex);
  }
  check_same_device(logits, labels);
  const at::Tensor rows = FusedRows::apply(logits.contiguous(), labels.contiguous());
  const at::Tensor total = rows.sum();
  if (reduction == TokenReduction::kSum) return total;
  // The count stays on the device; no counted row gives 0/0 = NaN, as LibTorch's mean.
  return total / labels.ne(kIgnoreIndex).sum().to(at::kFloat);
}

at::Tensor token_cross_entropy_grad(const at::Tensor& logits, const at::Tensor& labels,
                                    const at::Tensor& scale) {
  check_rows(logits, labels);
  ZT_CHECK(scale.numel() == 1, "token cross-entropy gradient: scale must have one element, got ",
           scale.sizes());
  if (!fused_cross_entropy(logits)) {
    at::Tensor g = at::softmax(logits.to(at::kFloat), -1);
    const at::Tensor counted = labels.ne(kIgnoreIndex);
    const at::Tensor rows = at::arange(labels.size(0), labels.options());
    const at::Tensor cols = labels.clamp_min(0);
    g.index_put_({rows, cols}, g.index({rows, cols}) - 1.0);
    g.mul_(counted.unsqueeze(1).to(g.scalar_type())).mul_(scale.to(at::kFloat));
    return g.to(logits.scalar_type());
  }
  check_same_device(logits, labels);
  const at::Tensor x = logits.contiguous(), y = labels.contiguous();
  const at::Tensor per_row =
      scale.to(x.device(), at::kFloat).reshape({1}).expand({x.size(0)}).contiguous();
  at::Tensor grad = at::empty(x.sizes(), x.options());
  launch(x, y, nullptr, nullptr, grad, per_row.data_ptr<float>(), nullptr);
  return grad;
}

}  // namespace zt::ops
