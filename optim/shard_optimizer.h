#pragma once
// ShardOptimizer: one optimizer stepping one flat fp32 shard (the slice of a ZeRO flat buffer a
// rank owns). The engine owns the step counter of the LR schedule, the loss scaler and the
// gradient reduction; an optimizer only sees
//
//   master  // flat fp32, contiguous, 1-D, numel = N (padded slice of the flat buffer)
//   grad    // flat fp32, same size and device as master; the gradient an update uses is
//           // grad * grad_scale of the element's group (the engine folds the average over
//           // ranks, the loss-scale undo and the clipping factor into the update's one pass
//           // instead of rewriting the gradient first); grad itself is never written
//   groups  // disjoint [begin, end) ranges of [0, N), each with its hyper-parameters
//
// Elements outside every group are padding (or frozen parameters): neither they nor their state
// are ever read for the update or written. Every state tensor whose numel is N is laid out like
// master (element i of the state belongs to master[i]), so checkpoint code may reshard it exactly
// as it reshards master.
//
// State is allocated lazily at the first step with master.numel() elements (or eagerly by
// init(numel)) on master's device. step_count() counts completed step() calls; bias correction
// uses step_count() after the increment, so the first step uses t = 1, as PyTorch does.
//
// Semantics follow PyTorch's torch.optim (see each class):
//   Adam   grad += wd * p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//          p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//   AdamW  p *= 1 - lr * wd, then Adam without the L2 term.
//   SGD    d = g + wd p; buf = d (first step) or momentum buf + (1 - dampening) d;
//          d = nesterov ? d + momentum buf : buf; p -= lr d
//   Lion   c = b1 m + (1-b1) g; p *= 1 - lr wd; p -= lr sign(c); m = b2 m + (1-b2) g
//   Lamb   DeepSpeed's FusedLamb, one trust ratio per group of the shard (see optim/lamb.h)
//   Muon   DeepSpeed's MuonWithAuxAdam; its ranges hold the orthogonalised update, not the
//          gradient (see optim/muon.h)
//
// Thread-safety: one ShardOptimizer is used by one thread at a time.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "optim/muon_spec.h"
#include "optim/optimizer_kind.h"
#include "optim/swa_spec.h"

namespace zt::optim {

// Hyper-parameters of one parameter group. lr is set by the engine every step from the schedule
// (and the LLRD factor of the group); the other fields come from the optimizer config.
struct GroupHyper {
  double lr = 1e-3;
  double weight_decay = 0;
  double beta1 = 0.9;  // Adam/Lion betas; ignored by SGD
  double beta2 = 0.999;
  double eps = 1e-8;
  double momentum = 0;  // SGD only
  bool nesterov = false;
  double dampening = 0;  // SGD only (torch's dampening; nesterov needs 0)
  // Muon: the range is a Muon matrix's (grad holds its orthogonalised update; momentum is Muon's);
  // false: the auxiliary Adam's (optim/muon.h).
  bool muon = false;
  // Factor on the gradient (see the file comment), rounded to float once, so grad * grad_scale is
  // one fp32 multiply per element, as a separate at::mul_ by the same factor would round it.
  double grad_scale = 1.0;
};

// The gradient of one group as its update uses it: g itself when scale is 1, else g * scale (a
// temporary). For the optimizers that run ATen ops per group; the fused ones multiply in their
// pass.
at::Tensor scaled_grad(const at::Tensor& g, double scale);

// One group: elements [begin, end) of the shard. Ranges of one step are disjoint; need not be
// sorted or cover the shard.
struct GroupRange {
  int64_t begin = 0;
  int64_t end = 0;
  GroupHyper hyper;
};

// Options of make_shard_optimizer. The hyper-parameters live in GroupRange, not here.
struct OptimizerSpec {
  OptimizerKind type = OptimizerKind::kAdamW;
  // CpuAdam, Adam8bit, FusedAdam: decoupled weight decay (AdamW) when true, L2 (Adam) when false.
  bool adamw_mode = true;
  // CpuAdam: SIMD path: "auto" (best the CPU supports), "avx512", "avx2" or "scalar". A path the
  // CPU lacks is an error. The environment variable ZT_CPU_ADAM_SIMD overrides "auto".
  std::string simd = "auto";
  // CpuAdam: elements per task of the thread pool (LibTorch's intra-op pool, at::parallel_for).
  int64_t tile = 1 << 16;
  // Adam8bit: elements per quantization block (the paper uses 2048; 256 also common).
  int64_t block_size = 2048;
  // Adam8bit: shards with fewer elements keep 32-bit state (the paper's small-tensor rule).
  int64_t min_8bit_size = 4096;
  // FusedAdam, and Adam8bit on CUDA: the plugin's launcher (zt_fused_adam, see fused_adam.h;
  // zt_adam8bit, see adam8bit_launch.h), e.g. from zt::cuda::require_symbol("zt_fused_adam",
  // "fused Adam"). nullptr: looked up with dlsym(RTLD_DEFAULT) at the first step, which finds it
  // once zt_core has loaded the plugin.
  void* cuda_launcher = nullptr;
  // Lamb (DeepSpeed's FusedLamb, optim/lamb.h): trust-ratio clamp, eps placement, bias
  // correction of the step size.
  double max_coeff = 10.0;
  double min_coeff = 0.01;
  bool eps_inside_sqrt = false;
  bool bias_correction = true;
  // Muon: Newton-Schulz variant and the lr factor of each half (optim/muon_spec.h).
  MuonSpec muon;
  // Stochastic weight averaging of the shard's masters (optim/swa.h); off by default.
  SwaSpec swa;
};

class ShardOptimizer {
 public:
  virtual ~ShardOptimizer();

  // One update of master from grad, group by group; see the file comment for the contract.
  // half_out: optional fp16/bf16 tensor of master's size (same device) that receives the updated
  // master of every grouped element in the same pass (the compute copy of the weights).
  virtual void step(at::Tensor& master, const at::Tensor& grad,
                    const std::vector<GroupRange>& groups, at::Tensor* half_out = nullptr) = 0;
  // Allocates state for a shard of numel elements now (zero-filled, CPU fp32 unless the
  // optimizer says otherwise); step() does it lazily otherwise.
  virtual void init(int64_t numel, const at::TensorOptions& options);
  // Bytes of optimizer state held (0 before the first step/init).
  virtual int64_t state_bytes() const = 0;
  // Tensors that restore the optimizer with load_state_dict: always "step" (int64, 0-d) plus the
  // optimizer's own buffers (documented per class). Tensors are shared, not copied.
  virtual std::map<std::string, at::Tensor> state_dict() const = 0;
  virtual void load_state_dict(const std::map<std::string, at::Tensor>& state) = 0;
  // The optimizer's type name as in OptimizerSpec::type.
  virtual std::string name() const = 0;
  // Takes `state` (the tensors state_dict() names besides "step", each laid out like the master:
  // views of a chunk that a master store holds, core/zero/master_store.h) for the next steps, at
  // the current step count. True when the optimizer updates them in place (no copy in or out);
  // false when it loaded copies, and the caller reads the updated values back from state_dict().
  virtual bool adopt_state(const std::map<std::string, at::Tensor>& state);

  int64_t step_count() const { return step_count_; }

 protected:
  // Checks master/grad/groups/half_out against the contract; throws zt::Error naming the culprit.
  void check_step_args(const at::Tensor& master, const at::Tensor& grad,
                       const std::vector<GroupRange>& groups, const at::Tensor* half_out) const;
  // state_dict()/load_state_dict() helpers for the "step" entry.
  at::Tensor step_tensor() const;
  void load_step(const std::map<std::string, at::Tensor>& state);
  // state_dict()/load_state_dict() of an optimizer whose own state is Adam's two moments,
  // "exp_avg" and "exp_avg_sq" (both absent before the first step). Loading reads "step", then
  // replaces both moments with fp32 contiguous copies on the device the entries come on, or
  // leaves both undefined when the state has none.
  std::map<std::string, at::Tensor> moments_state_dict(const at::Tensor& exp_avg,
                                                       const at::Tensor& exp_avg_sq) const;
  void load_moments_state_dict(const std::map<std::string, at::Tensor>& state, at::Tensor* exp_avg,
                               at::Tensor* exp_avg_sq);
  // adopt_state() of such an optimizer: takes exp_avg and exp_avg_sq themselves (true) when both
  // are contiguous fp32 of one size on one device, else loads copies (false).
  bool adopt_moments(const std::map<std::string, at::Tensor>& state, at::Tensor* exp_avg,
                     at::Tensor* exp_avg_sq);

  int64_t step_count_ = 0;
};

std::unique_ptr<ShardOptimizer> make_shard_optimizer(const OptimizerSpec& spec);

// The spec that steps a master living on `where`: Adam and AdamW become that device's one-pass
// form (CpuAdam on the host; FusedAdam on a GPU, with the CUDA plugin's launcher), the same update
// as the per-group ATen ops, as DeepSpeed picks DeepSpeedCPUAdam and FusedAdam; every other kind
// is kept. The one place an optimizer kind is chosen from the device.
OptimizerSpec resolve_for_device(OptimizerSpec spec, const c10::Device& where);

// The state tensor `key` of `state`, checked to exist with `numel` elements (numel < 0: any).
at::Tensor state_entry(const std::map<std::string, at::Tensor>& state, const std::string& key,
                       int64_t numel, const std::string& who);

}  // namespace zt::optim
