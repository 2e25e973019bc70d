#include "optim/shard_optimizer.h"

#include <algorithm>
#include <utility>

#include <ATen/ATen.h>

#include "base/cuda_plugin.h"
#include "base/error.h"
#include "optim/adam.h"
#include "optim/adam8bit.h"
#include "optim/cpu_adam.h"
#include "optim/fused_adam.h"
#include "optim/fused_adam_launch.h"
#include "optim/lamb.h"
#include "optim/lion.h"
#include "optim/muon.h"
#include "optim/sgd.h"
#include "optim/swa.h"

namespace zt::optim {

ShardOptimizer::~ShardOptimizer() = default;

void ShardOptimizer::init(int64_t, const at::TensorOptions&) {}

bool ShardOptimizer::adopt_state(const std::map<std::string, at::Tensor>& state) {
  std::map<std::string, at::Tensor> with_step = state;
  with_step["step"] = at::scalar_tensor(step_count_, at::kLong);
  load_state_dict(with_step);
  return false;
}

void ShardOptimizer::check_step_args(const at::Tensor& master, const at::Tensor& grad,
                                     const std::vector<GroupRange>& groups,
                                     const at::Tensor* half_out) const {
  const std::string who = name();
  ZT_CHECK(master.defined() && master.dim() == 1 && master.is_contiguous() &&
               master.scalar_type() == at::kFloat,
           who, ": master must be a contiguous 1-D fp32 tensor, got ",
           master.defined() ? master.toString() : "undefined", " of shape ", master.sizes());
  ZT_CHECK(grad.defined() && grad.dim() == 1 && grad.is_contiguous() &&
               grad.scalar_type() == at::kFloat && grad.numel() == master.numel(),
           who, ": grad must be a contiguous 1-D fp32 tensor of ", master.numel(),
           " elements, got ", grad.defined() ? grad.toString() : "undefined", " of shape ",
           grad.sizes());
  ZT_CHECK(grad.device() == master.device(), who, ": grad is on ", grad.device(), " but master on ",
           master.device());
  if (half_out) {
    ZT_CHECK(
        half_out->defined() && half_out->is_contiguous() && half_out->numel() == master.numel() &&
            (half_out->scalar_type() == at::kHalf || half_out->scalar_type() == at::kBFloat16) &&
            half_out->device() == master.device(),
        who, ": half_out must be a contiguous fp16/bf16 tensor of ", master.numel(),
        " elements on ", master.device());
  }
  // Disjointness: sort a copy of the ranges by begin.
  std::vector<std::pair<int64_t, int64_t>> r;
  r.reserve(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    const GroupRange& g = groups[i];
    ZT_CHECK(g.begin >= 0 && g.begin <= g.end && g.end <= master.numel(), who, ": group ", i,
             " range [", g.begin, ", ", g.end, ") is outside the shard of ", master.numel(),
             " elements");
    const GroupHyper& h = g.hyper;
    ZT_CHECK(h.lr >= 0 && h.weight_decay >= 0 && h.eps >= 0, who, ": group ", i,
             " needs lr, weight_decay, eps >= 0, got ", h.lr, ", ", h.weight_decay, ", ", h.eps);
    ZT_CHECK(h.beta1 >= 0 && h.beta1 < 1 && h.beta2 >= 0 && h.beta2 < 1, who, ": group ", i,
             " betas must be two numbers in [0,1), got (", h.beta1, ", ", h.beta2, ")");
    r.emplace_back(g.begin, g.end);
  }
  std::sort(r.begin(), r.end());
  for (size_t i = 1; i < r.size(); ++i) {
    ZT_CHECK(r[i].first >= r[i - 1].second, who, ": group ranges [", r[i - 1].first, ", ",
             r[i - 1].second, ") and [", r[i].first, ", ", r[i].second, ") overlap");
  }
}

at::Tensor scaled_grad(const at::Tensor& g, double scale) {
  const auto s = static_cast<float>(scale);
  if (s == 1.0f) return g;
  return g.mul(static_cast<double>(s));
}

at::Tensor ShardOptimizer::step_tensor() const {
  return at::scalar_tensor(step_count_, at::kLong);
}

void ShardOptimizer::load_step(const std::map<std::string, at::Tensor>& state) {
  at::Tensor s = state_entry(state, "step", 1, name());
  step_count_ = s.to(at::kLong).item<int64_t>();
  ZT_CHECK(step_count_ >= 0, name(), ": state \"step\" must be >= 0, got ", step_count_);
}

std::map<std::string, at::Tensor> ShardOptimizer::moments_state_dict(
    const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq) const {
  std::map<std::string, at::Tensor> s{{"step", step_tensor()}};
  if (exp_avg.defined()) {
    s["exp_avg"] = exp_avg;
    s["exp_avg_sq"] = exp_avg_sq;
  }
  return s;
}

bool ShardOptimizer::adopt_moments(const std::map<std::string, at::Tensor>& state,
                                   at::Tensor* exp_avg, at::Tensor* exp_avg_sq) {
  auto it_m = state.find("exp_avg"), it_v = state.find("exp_avg_sq");
  const bool usable = it_m != state.end() && it_v != state.end() && state.size() == 2 &&
                      it_m->second.scalar_type() == at::kFloat &&
                      it_v->second.scalar_type() == at::kFloat && it_m->second.is_contiguous() &&
                      it_v->second.is_contiguous() &&
                      it_m->second.numel() == it_v->second.numel() &&
                      it_m->second.device() == it_v->second.device();
  if (!usable) return ShardOptimizer::adopt_state(state);
  *exp_avg = it_m->second;
  *exp_avg_sq = it_v->second;
  return true;
}

void ShardOptimizer::load_moments_state_dict(const std::map<std::string, at::Tensor>& state,
                                             at::Tensor* exp_avg, at::Tensor* exp_avg_sq) {
  load_step(state);
  *exp_avg = *exp_avg_sq = at::Tensor();
  if (state.count("exp_avg") == 0) return;
  *exp_avg = state_entry(state, "exp_avg", -1, name()).to(at::kFloat).contiguous().clone();
  *exp_avg_sq = state_entry(state, "exp_avg_sq", exp_avg->numel(), name())
                    .to(at::kFloat)
                    .contiguous()
                    .clone();
}

at::Tensor state_entry(const std::map<std::string, at::Tensor>& state, const std::string& key,
                       int64_t numel, const std::string& who) {
  auto it = state.find(key);
  ZT_CHECK(it != state.end() && it->second.defined(), who, ": state_dict has no \"", key, "\"");
  ZT_CHECK(numel < 0 || it->second.numel() == numel, who, ": state \"", key, "\" has ",
           it->second.numel(), " elements, expected ", numel);
  return it->second;
}

std::unique_ptr<ShardOptimizer> make_shard_optimizer(const OptimizerSpec& spec) {
  if (spec.swa.enabled) {
    OptimizerSpec plain = spec;
    plain.swa.enabled = false;
    return std::make_unique<SwaShardOptimizer>(make_shard_optimizer(plain), spec.swa);
  }
  switch (spec.type) {
    case OptimizerKind::kAdam: return std::make_unique<Adam>(/*decoupled=*/false);
    case OptimizerKind::kAdamW: return std::make_unique<Adam>(/*decoupled=*/true);
    case OptimizerKind::kSgd: return std::make_unique<Sgd>();
    case OptimizerKind::kLion: return std::make_unique<Lion>();
    case OptimizerKind::kLamb: return std::make_unique<Lamb>(spec);
    case OptimizerKind::kCpuAdam: return std::make_unique<CpuAdam>(spec);
    case OptimizerKind::kAdam8bit: return std::make_unique<Adam8bit>(spec);
    case OptimizerKind::kFusedAdam: return std::make_unique<FusedAdam>(spec);
    case OptimizerKind::kMuon: return std::make_unique<Muon>(spec);
  }
  ZT_THROW("unknown optimizer kind ", static_cast<int>(spec.type));
}

OptimizerSpec resolve_for_device(OptimizerSpec spec, const c10::Device& where) {
  if (spec.type != OptimizerKind::kAdam && spec.type != OptimizerKind::kAdamW) return spec;
  spec.adamw_mode = spec.type == OptimizerKind::kAdamW;
  if (where.is_cuda()) {
    spec.type = OptimizerKind::kFusedAdam;
    spec.cuda_launcher = cuda::require_symbol(kFusedAdamSymbol, "Adam on a GPU shard");
  } else if (where.is_cpu()) {
    spec.type = OptimizerKind::kCpuAdam;
  }
  // Any other accelerator (the test device) has no fused kernel of ours: the ATen update
  // (optim/adam.h), which runs wherever ATen's kernels do.
  return spec;
}

}  // namespace zt::optim
