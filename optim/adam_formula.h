#pragma once
// The Adam/AdamW update, written once for every implementation that runs it element by element:
// CpuAdam (scalar, AVX2, AVX-512 builds), Adam8bit (CPU pass and CUDA kernel) and FusedAdam (CUDA
// kernel). Semantics: torch.optim.Adam (L2 in the gradient) or AdamW (decoupled decay), in fp32.
//
// 1. The per-step constants. adam_constants() computes them in double from the group's
//    hyper-parameters and the step count t (t = 1 at the first step, as PyTorch), and rounds each
//    to float once. Every implementation takes them from here and derives nothing itself: e.g.
//    1 - beta2 computed in float from float(0.999) is 9.9998713e-4, the double one rounded once is
//    1.0000000e-3, 1.3e-5 apart relative, enough to break an rtol 1e-5 comparison once v grows.
//
// 2. The per-element update, in one of two roundings:
//      unfused (kFused = false): every multiply and add rounded on its own. CpuAdam's scalar
//        build and Adam8bit (CPU and CUDA: the 8-bit kernel must match the CPU codes bit for bit).
//      fused (kFused = true): the five multiply-adds below are fused (one rounding each). CpuAdam's
//        AVX2/AVX-512 builds (vfmadd) and the FusedAdam CUDA kernel (fmaf).
//    Both are IEEE-exact per operation, so a host build of adam_update<kFused> reproduces every
//    implementation of that rounding bit for bit (the tests use it as the reference). On the
//    device, the unfused form uses __fmul_rn/__fadd_rn so nvcc cannot contract it into FMAs; on
//    the host it relies on the project's default x86-64 flags, which have no FMA to contract into
//    (the SIMD builds of CpuAdam carry their own copy in intrinsics and never call this).
//
//    g = g * grad_scale                                (the engine's averaging, loss-scale
//                                                       and clipping factors, folded into this
//                                                       pass; 1 is exact)
//    p = p * decay_factor                              (AdamW: 1 - lr wd; Adam: 1)
//    g = g + l2_weight_decay * p                       (Adam only: skipped when 0, so inf p
//                                                       with wd 0 does not become 0 * inf = NaN)
//    m = beta1 m + one_minus_beta1 g
//    v = beta2 v + one_minus_beta2 g^2
//    p = p + neg_step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps)
//
// Plain structs and inline code only, no LibTorch, so nvcc compiles it into the kernels.

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define ZT_ADAM_HOST_DEVICE __host__ __device__
#else
#define ZT_ADAM_HOST_DEVICE
#endif

namespace zt::optim {

struct GroupHyper;  // shard_optimizer.h (ATen-free here so that nvcc compiles this header)

// One group's constants of one step, each rounded to float once from double.
struct AdamConstants {
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float eps;
  float neg_step_size;    // -lr / (1 - beta1^t)
  float inv_sqrt_bc2;     // 1 / sqrt(1 - beta2^t)
  float decay_factor;     // AdamW: 1 - lr * wd; Adam: 1
  float l2_weight_decay;  // Adam: wd (added to the gradient as wd * p); AdamW: 0
  float grad_scale;       // the group's GroupHyper::grad_scale: the gradient used is g * grad_scale
};

// The constants of step t (>= 1) of one group (lr, betas, eps, weight_decay of h); adamw_mode:
// decoupled decay (AdamW) or L2 (Adam). Host only, in zt_optim: the kernels receive the result.
AdamConstants adam_constants(const GroupHyper& h, bool adamw_mode, int64_t t);

namespace adam_detail {

ZT_ADAM_HOST_DEVICE inline float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

ZT_ADAM_HOST_DEVICE inline float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

ZT_ADAM_HOST_DEVICE inline float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

ZT_ADAM_HOST_DEVICE inline float sqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// a * b + c: one rounding when kFused, two otherwise.
template <bool kFused>
ZT_ADAM_HOST_DEVICE inline float madd(float a, float b, float c) {
  if constexpr (kFused) {
#if defined(__CUDA_ARCH__)
    return __fmaf_rn(a, b, c);
#else
    return std::fma(a, b, c);
#endif
  } else {
    return add(mul(a, b), c);
  }
}

}  // namespace adam_detail

// One element's update (see the file comment): p, m, v in place, g the unscaled gradient.
template <bool kFused>
ZT_ADAM_HOST_DEVICE inline void adam_update(const AdamConstants& c, float& p, float g, float& m,
                                            float& v) {
  using adam_detail::madd;
  using adam_detail::mul;
  g = mul(g, c.grad_scale);
  p = mul(p, c.decay_factor);
  if (c.l2_weight_decay != 0.0f) g = madd<kFused>(c.l2_weight_decay, p, g);
  m = madd<kFused>(c.one_minus_beta1, g, mul(m, c.beta1));
  v = madd<kFused>(c.one_minus_beta2, mul(g, g), mul(v, c.beta2));
  const float denom = madd<kFused>(adam_detail::sqrt(v), c.inv_sqrt_bc2, c.eps);
  p = madd<kFused>(c.neg_step_size, adam_detail::div(m, denom), p);
}

}  // namespace zt::optim
