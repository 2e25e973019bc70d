#pragma once
// One batch split along the sequence for Ulysses sequence parallelism (parallel/topology.h): the
// sp ranks of a sequence group read the same batch, and rank i keeps positions
// [i T'/sp, (i+1) T'/sp), T' being T rounded up to a multiple of sp. The rounding pads on the
// right as the collator does: the pad id, attention mask 0, labels -100, so the padding is
// masked out of attention and of the loss. Labels were shifted by the collator before the split,
// so each position's label is the next token even across the boundary between two ranks.

#include <cstdint>

#include "data/collator.h"

namespace zt::data {

// `part` of `parts`; input_ids, attention_mask and labels (B, T) -> (B, T' / parts); the per-row
// fields (sample_labels, indices, repeated) are kept; num_tokens and num_padded_tokens count this
// part. parts == 1 returns the batch as it is.
Batch sequence_part(const Batch& batch, int part, int parts, int64_t pad_id);

}  // namespace zt::data
