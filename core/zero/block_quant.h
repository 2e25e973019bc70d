#pragma once
// ZeRO++ qwZ (zero_quantized_weights): a stage-3 all-gather moves each rank's shard as symmetric
// int8 blocks with one fp32 scale per block, and every rank rebuilds the full buffer from them.
//
// A shard of n elements is cut into `blocks` blocks of `block` elements (the last padded with
// zeros). Each block stores q = round(x / s) in [-127, 127] with s = max|x| / 127 over the block,
// so the rebuilt value is q * s and |x - q * s| <= max|x| / 254 in every block (half a step),
// plus the rounding of the compute dtype the result is written in. The block count follows
// DeepSpeed's CUDAQuantizer (deepspeed/runtime/zero/partition_parameters.py: about 8000 elements
// a block, a count that divides n into multiples of 8); a shard that rule cannot split into
// blocks of at least 1024 elements gets ceil(n / 8000) blocks instead. Bytes on the wire per
// element: 1 + 4 / block, against 2 (bf16/fp16) or 4 (fp32).

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace zt::zero {

struct QuantBlocks {
  int64_t numel = 0;   // elements of one shard
  int64_t blocks = 0;  // blocks per shard
  int64_t block = 0;   // elements per block; blocks * block >= numel
};

QuantBlocks quant_blocks(int64_t numel);

// `src` (parts * numel,) of any floating dtype, `parts` shards one after another -> `q`
// (parts * blocks * block,) int8 and `scales` (parts * blocks,) fp32, allocated here on src's
// device.
//
// Quantizing the fp32 values dequantize_blocks rebuilds gives the same blocks and scales again: a
// block's largest rebuilt value is fl(127 s), and fl(fl(127 s) / 127) == s for s = fl(m / 127)
// (block_quant_test checks it over many binades). Stored frozen shards
// (zero_quantized_nontrainable_weights) rely on it: a checkpoint saves them rebuilt in fp32 and a
// load quantizes them back bit for bit.
void quantize_blocks(const at::Tensor& src, const QuantBlocks& qb, at::Tensor* q,
                     at::Tensor* scales, int64_t parts = 1);

// The blocks of `parts` shards, q (parts * blocks * block,) and scales (parts * blocks,), rebuilt
// into `out` (parts * numel,), in out's dtype.
void dequantize_blocks(const at::Tensor& q, const at::Tensor& scales, const QuantBlocks& qb,
                       int64_t parts, at::Tensor& out);

}  // namespace zt::zero
