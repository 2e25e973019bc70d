#include "optim/cpu_adam.h"

#include <cstdlib>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "base/env_vars.h"
#include "base/error.h"
#include "base/logging.h"

namespace zt::optim {

const char* simd_path_name(SimdPath path) {
  switch (path) {
    case SimdPath::kScalar: return "scalar";
    case SimdPath::kAvx2: return "avx2";
    case SimdPath::kAvx512: return "avx512";
  }
  return "?";
}

bool simd_path_supported(SimdPath path) {
  switch (path) {
    case SimdPath::kScalar: return true;
    case SimdPath::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case SimdPath::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
  }
  return false;
}

SimdPath best_simd_path() {
  if (simd_path_supported(SimdPath::kAvx512)) return SimdPath::kAvx512;
  if (simd_path_supported(SimdPath::kAvx2)) return SimdPath::kAvx2;
  return SimdPath::kScalar;
}

SimdPath parse_simd_path(const std::string& name) {
  std::string n = name;
  if (n == "auto") {
    const char* env = ::zt::env::get(kCpuAdamSimdEnv);
    if (env == nullptr || *env == '\0' || std::string(env) == "auto") return best_simd_path();
    n = env;
  }
  SimdPath p;
  if (n == "avx512") {
    p = SimdPath::kAvx512;
  } else if (n == "avx2") {
    p = SimdPath::kAvx2;
  } else if (n == "scalar") {
    p = SimdPath::kScalar;
  } else {
    ZT_THROW("CpuAdam simd path must be auto, avx512, avx2 or scalar (", kCpuAdamSimdEnv,
             " too), got \"", n, "\"");
  }
  ZT_CHECK(simd_path_supported(p), "CpuAdam simd path ", n, " is not supported by this CPU");
  return p;
}

CpuAdam::CpuAdam(const OptimizerSpec& spec)
    : adamw_mode_(spec.adamw_mode), tile_(spec.tile), path_(parse_simd_path(spec.simd)) {
  ZT_CHECK(tile_ > 0, "CpuAdam tile must be > 0, got ", tile_);
  switch (path_) {
    case SimdPath::kAvx512: kernel_ = &kernels::adam_avx512; break;
    case SimdPath::kAvx2: kernel_ = &kernels::adam_avx2; break;
    default: kernel_ = &kernels::adam_scalar; break;
  }
  ZT_LOG_DEBUG("CpuAdam: ", simd_path_name(path_), " path, ", at::get_num_threads(), " threads");
}

void CpuAdam::init(int64_t numel, const at::TensorOptions&) {
  exp_avg_ = at::zeros({numel}, at::kFloat);
  exp_avg_sq_ = at::zeros({numel}, at::kFloat);
}

void CpuAdam::step(at::Tensor& master, const at::Tensor& grad,
                   const std::vector<GroupRange>& groups, at::Tensor* half_out) {
  check_step_args(master, grad, groups, half_out);
  ZT_CHECK(master.is_cpu(), "CpuAdam: master must be a CPU tensor, got ", master.device());
  if (!exp_avg_.defined()) init(master.numel(), master.options());
  ZT_CHECK(exp_avg_.numel() == master.numel(), "CpuAdam: state has ", exp_avg_.numel(),
           " elements but master ", master.numel(), " (shard size changed?)");
  ++step_count_;
  kernels::HalfKind half_kind = kernels::HalfKind::kNone;
  uint16_t* half = nullptr;
  if (half_out) {
    half_kind = half_out->scalar_type() == at::kHalf ? kernels::HalfKind::kFloat16
                                                     : kernels::HalfKind::kBFloat16;
    half = static_cast<uint16_t*>(half_out->data_ptr());
  }
  float* p = master.data_ptr<float>();
  const float* g = grad.data_ptr<float>();
  float* m = exp_avg_.data_ptr<float>();
  float* v = exp_avg_sq_.data_ptr<float>();
  for (const GroupRange& gr : groups) {
    if (gr.end == gr.begin) continue;
    kernels::AdamArgs base{};
    base.half_kind = half_kind;
    base.c = adam_constants(gr.hyper, adamw_mode_, step_count_);
    auto kernel = kernel_;
    at::parallel_for(gr.begin, gr.end, tile_, [&](int64_t b, int64_t e) {
      kernels::AdamArgs a = base;
      a.param = p + b;
      a.grad = g + b;
      a.exp_avg = m + b;
      a.exp_avg_sq = v + b;
      a.half_out = half ? half + b : nullptr;
      a.n = e - b;
      kernel(a);
    });
  }
}

int64_t CpuAdam::state_bytes() const {
  return exp_avg_.defined() ? 2 * exp_avg_.numel() * static_cast<int64_t>(sizeof(float)) : 0;
}

std::map<std::string, at::Tensor> CpuAdam::state_dict() const {
  std::map<std::string, at::Tensor> s{{"step", step_tensor()}};
  if (exp_avg_.defined()) {
    s["exp_avg"] = exp_avg_;
    s["exp_avg_sq"] = exp_avg_sq_;
  }
  return s;
}

bool CpuAdam::adopt_state(const std::map<std::string, at::Tensor>& state) {
  ZT_CHECK(state.count("exp_avg") && state.count("exp_avg_sq"),
           "CpuAdam::adopt_state: needs exp_avg and exp_avg_sq");
  at::Tensor exp_avg = state.at("exp_avg"), exp_avg_sq = state.at("exp_avg_sq");
  for (const at::Tensor* t : {&exp_avg, &exp_avg_sq}) {
    ZT_CHECK(t->is_cpu() && t->scalar_type() == at::kFloat && t->is_contiguous() &&
                 t->numel() == exp_avg.numel(),
             "CpuAdam::adopt_state: the state must be contiguous CPU fp32 of one size, got ",
             t->scalar_type(), " on ", t->device(), " with ", t->numel(), " elements");
  }
  exp_avg_ = std::move(exp_avg);
  exp_avg_sq_ = std::move(exp_avg_sq);
  return true;
}

void CpuAdam::load_state_dict(const std::map<std::string, at::Tensor>& state) {
  load_step(state);
  exp_avg_ = exp_avg_sq_ = at::Tensor();
  if (state.count("exp_avg") == 0) return;
  at::Tensor m = state_entry(state, "exp_avg", -1, name());
  at::Tensor v = state_entry(state, "exp_avg_sq", m.numel(), name());
  exp_avg_ = m.to(at::kCPU, at::kFloat).contiguous().clone();
  exp_avg_sq_ = v.to(at::kCPU, at::kFloat).contiguous().clone();
}

}  // namespace zt::optim
