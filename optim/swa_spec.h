#pragma once
// Options of stochastic weight averaging (SWA, Izmailov et al. 2018), the config's `swa` block.
// The key names and the rule are torchcontrib's SWA optimizer wrapper
// (pytorch/contrib, torchcontrib/optim/swa.py: SWA(optimizer, swa_start, swa_freq), whose
// automatic mode averages after step t when t > swa_start and t % swa_freq == 0); the averaging
// itself is torch.optim.swa_utils.AveragedModel's equal-weight running mean. "The last K steps"
// of an N-step run is swa_start = N - K with swa_freq 1. Steps are optimizer steps, not epochs.

#include <cstdint>

namespace zt::optim {

struct SwaSpec {
  bool enabled = false;
  int64_t swa_start = 0;  // averaging begins after this many optimizer steps
  int64_t swa_freq = 1;   // ... and takes every swa_freq-th step's weights
};

}  // namespace zt::optim
