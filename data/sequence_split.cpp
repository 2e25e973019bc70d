#include "data/sequence_split.h"

#include "base/error.h"

namespace zt::data {

Batch sequence_part(const Batch& batch, int part, int parts, int64_t pad_id) {
  ZT_CHECK(parts >= 1 && part >= 0 && part < parts, "sequence_part: part ", part, " of ", parts);
  if (parts == 1) return batch;
  const int64_t t = batch.input_ids.size(1);
  const int64_t padded = (t + parts - 1) / parts * parts, local = padded / parts;
  auto piece = [&](const at::Tensor& x, int64_t fill) {
    if (!x.defined()) return x;
    at::Tensor whole = padded == t ? x : at::constant_pad_nd(x, {0, padded - t}, fill);
    return whole.narrow(1, part * local, local).contiguous();
  };
  Batch out = batch;
  out.input_ids = piece(batch.input_ids, pad_id);
  out.attention_mask = piece(batch.attention_mask, 0);
  out.labels = piece(batch.labels, -100);
  out.num_tokens = out.attention_mask.defined() ? out.attention_mask.sum().item<int64_t>()
                                                : out.input_ids.numel();
  out.num_padded_tokens = out.input_ids.numel();
  return out;
}

}  // namespace zt::data
