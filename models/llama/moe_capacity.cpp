#include "models/llama/moe_capacity.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"

namespace zt::models {

int64_t expert_capacity(int64_t tokens, int64_t experts, int64_t k, double factor,
                        int64_t min_capacity) {
  const double per =
      static_cast<double>(tokens) / static_cast<double>(experts) * factor * static_cast<double>(k);
  return std::max(static_cast<int64_t>(std::ceil(per)), min_capacity);
}

Routed limit_capacity(const torch::Tensor& probs, const torch::Tensor& index, int64_t capacity,
                      const std::string& policy) {
  const int64_t n = probs.size(0), experts = probs.size(1);
  torch::Tensor mask;  // (N, E): the choices each expert keeps
  {
    torch::NoGradGuard no_grad;
    mask = torch::zeros_like(probs, torch::kBool).scatter_(1, index, true);
    if (policy == "probs") {
      const torch::Tensor chosen =
          torch::zeros_like(probs).scatter(1, index, probs.detach().gather(1, index));
      const int64_t keep = std::min(capacity, n);
      const torch::Tensor best = std::get<1>(torch::topk(chosen, keep, 0, true, false));
      mask &= torch::zeros_like(mask).scatter_(0, best, true);
    } else {
      ZT_CHECK(policy == "position",
               "model.moe_drop_policy must be \"probs\" or \"position\", got \"", policy, "\"");
      mask &= (torch::cumsum(mask.to(torch::kLong), 0) - 1).lt(capacity);
    }
  }
  const torch::Tensor kept = mask.gather(1, index);
  const torch::Tensor p = probs.gather(1, index) * kept.to(probs.scalar_type());
  const torch::Tensor sum =
      p.sum(-1, /*keepdim=*/true).clamp_min(std::numeric_limits<float>::epsilon());
  Routed r;
  r.weight = p / sum;
  r.index = torch::where(kept, index, torch::full_like(index, experts));
  return r;
}

}  // namespace zt::models
