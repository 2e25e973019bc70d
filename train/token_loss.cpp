#include "train/token_loss.h"

#include "base/error.h"
#include "train/rank_sum.h"

namespace zt::train {

double token_loss_scale(int64_t local_tokens, const dist::Topology& topology, int accumulation) {
  ZT_CHECK(accumulation >= 1, "token_loss_scale: accumulation ", accumulation);
  const double total = sum_over_ranks(*topology.batch, {static_cast<double>(local_tokens)}).front();
  if (total <= 0) return 0.0;
  return static_cast<double>(topology.data_parallel_size()) * accumulation / total;
}

}  // namespace zt::train
