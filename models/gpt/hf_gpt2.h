#pragma once
// The GPT example in Hugging Face GPT-2's format (transformers' GPT2LMHeadModel): config.json +
// model.safetensors, out and in. Same architecture, other names and layout:
//
// clang-format off
//   ours (gpt_model.h)              GPT-2                                 layout
//   wte.weight (V, C)               transformer.wte.weight                same
//   wpe.weight (P, C)               transformer.wpe.weight                same
//   blocks.N.ln1.{weight,bias}      transformer.h.N.ln_1.*                same
//   blocks.N.attn.qkv.weight (3C,C) transformer.h.N.attn.c_attn.weight    Conv1D: (C, 3C) = ours^T
//   blocks.N.attn.qkv.bias          transformer.h.N.attn.c_attn.bias      same (q, k, v thirds)
//   blocks.N.attn.proj.*            transformer.h.N.attn.c_proj.*         weight transposed
//   blocks.N.ln2.*                  transformer.h.N.ln_2.*                same
//   blocks.N.fc.* (4C, C)           transformer.h.N.mlp.c_fc.*            weight transposed
//   blocks.N.out.* (C, 4C)          transformer.h.N.mlp.c_proj.*          weight transposed
//   ln_f.{weight,bias}              transformer.ln_f.*                    same
//   (tied head)                     lm_head.weight                        not written: tied
// clang-format on
//
// Both are pre-LayerNorm (eps 1e-5) with biases everywhere, a fused q/k/v projection split in
// that order, heads split as view(B, T, H, C/H), attention scaled by 1/sqrt(C/H), an MLP of width
// 4C and the output head tied to wte. The one difference is the MLP activation: GPT-2 uses
// "gelu_new" (tanh approximation), ours defaults to exact GELU; model.activation: gelu_new makes
// the two compute the same function. Exported config.json says which one the weights were
// trained with, so either loads into GPT2LMHeadModel exactly.

#include <map>
#include <string>

#include <ATen/core/Tensor.h>

#include "models/gpt/gpt_block.h"

namespace zt::models {

// Values by our parameter names (gpt_model.h).
using NamedTensors = std::map<std::string, at::Tensor>;

// GPT-2's name of our parameter `name`, and whether its weight is stored transposed (Conv1D
// orientation [in, out]). Throws for a name the GPT example does not have.
std::string hf_gpt2_name(const std::string& name, bool* transposed);
// Our name of GPT-2's `hf_name` (with or without the "transformer." prefix). Returns "" for what
// carries no weight of ours: the tied lm_head.weight and the causal-mask buffers some GPT-2
// checkpoints hold (attn.bias, attn.masked_bias). Throws for other names.
std::string gpt_name_from_hf(const std::string& hf_name, bool* transposed);

// GPT-2's config.json for a model of this shape.
std::string hf_gpt2_config_json(const GptShape& shape);
// The shape a GPT-2 config.json describes; throws one line naming the file and key for what our
// GPT cannot compute (another LayerNorm eps, n_inner != 4 n_embd, an untied head, cross
// attention, other attention scalings, an activation other than gelu/gelu_new).
GptShape gpt_shape_from_hf_config(const std::string& config_json_path);

// Writes OUT_DIR/config.json and OUT_DIR/model.safetensors (fp32 unless the values are another
// dtype) in GPT-2's names and layout. `values` must hold every parameter of the shape.
void write_hf_gpt2(const std::string& out_dir, const GptShape& shape, const NamedTensors& values);

struct HfGpt2 {
  GptShape shape;
  NamedTensors values;  // by our names, in our layout
};
// Reads DIR/config.json and DIR/model.safetensors, or the shards DIR/model.safetensors.index.json
// names. A tied lm_head.weight, when present, must equal wte.
HfGpt2 read_hf_gpt2(const std::string& dir);

}  // namespace zt::models
