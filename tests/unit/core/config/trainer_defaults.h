#pragma once
// The Hugging Face Trainer's defaults for what "auto" stands for, as CliOptions::program_values
// gives them without flags: shared by the config tests that resolve "auto".

#include <vector>

#include "core/config/config.h"

namespace zt::config_test {

inline ProgramValues trainer_defaults() {
  ProgramValues p;
  p.micro_batch_size = 8;
  p.gradient_accumulation_steps = 1;
  p.gradient_clipping = 1.0;
  p.fp16 = false;
  p.bf16 = false;
  p.lr = 5e-5;
  p.betas = std::vector<double>{0.9, 0.999};
  p.eps = 1e-8;
  p.weight_decay = 0.0;
  p.warmup_steps = 0;
  p.warmup_ratio = 0.0;
  return p;
}

}  // namespace zt::config_test
