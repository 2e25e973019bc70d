#pragma once
// Whether a step whose gradients hold inf/NaN is skipped (on every rank: the sharded step's
// global sum of squares is the vote, core/zero/sharded_step.h). DeepSpeed 0.19.8's rule, found by
// running it (tests/multirank/core/precision/deepspeed_overflow_rule.py: one rank, gloo, an inf in
// one input, each stage, dtype and bf16.check_grad_overflow, with and without clipping and
// optimizer offload, which change nothing):
//
//              fp32        bf16                                fp16
//   stage 0    steps       skips (check_grad_overflow ignored)  skips (the loss scaler backs off)
//   stage 1-2  skips       skips; steps with check false        skips
//   stage 3    skips       skips (check_grad_overflow ignored)  skips
//
// "steps": the optimizer takes the inf/NaN and the parameters become non-finite, as the plain
// torch optimizer does under DeepSpeed's stage 0 in fp32.

#include "core/engine_options.h"

namespace zt {

inline bool skips_nonfinite_steps(const EngineOptions& o) {
  if (o.compute_dtype == at::kHalf) return true;
  if (o.compute_dtype == at::kBFloat16) {
    return o.stage == 0 || o.stage == 3 || o.bf16_check_grad_overflow;
  }
  return o.stage >= 1;
}

}  // namespace zt
