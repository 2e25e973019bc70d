#pragma once
// Options of Muon (optim/muon.h) that are not per-group hyper-parameters: the config's
// optimizer.params ns_method, and muon_lr / adam_lr as factors on the scheduled lr of each half.

namespace zt::optim {

// Newton-Schulz variant: kGram iterates on the Gram matrix X X^T (DeepSpeed's default), kStandard
// on X itself. Both are the same polynomial; they differ in rounding and cost.
enum class NsMethod { kGram, kStandard };

struct MuonSpec {
  NsMethod ns_method = NsMethod::kGram;
  // The lr of each half is the scheduled lr times its factor (muon_lr / lr and adam_lr / lr when
  // the config sets them; 1 otherwise).
  double muon_lr_scale = 1.0;
  double adam_lr_scale = 1.0;
};

}  // namespace zt::optim
