#include "optim/adam_formula.h"

#include <cmath>

#include "base/error.h"
#include "optim/shard_optimizer.h"

namespace zt::optim {

AdamConstants adam_constants(const GroupHyper& h, bool adamw_mode, int64_t t) {
  ZT_CHECK(t >= 1, "Adam step count must be >= 1 (bias correction of step t), got ", t);
  const double td = static_cast<double>(t);
  AdamConstants c;
  c.beta1 = static_cast<float>(h.beta1);
  c.one_minus_beta1 = static_cast<float>(1.0 - h.beta1);
  c.beta2 = static_cast<float>(h.beta2);
  c.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  c.eps = static_cast<float>(h.eps);
  c.neg_step_size = static_cast<float>(-h.lr / (1.0 - std::pow(h.beta1, td)));
  c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(h.beta2, td)));
  c.decay_factor = adamw_mode ? static_cast<float>(1.0 - h.lr * h.weight_decay) : 1.0f;
  c.l2_weight_decay = adamw_mode ? 0.0f : static_cast<float>(h.weight_decay);
  c.grad_scale = static_cast<float>(h.grad_scale);
  return c;
}

}  // namespace zt::optim
