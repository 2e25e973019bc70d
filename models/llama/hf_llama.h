#pragma once
// The LLaMA-family example in Hugging Face's format: a directory transformers' from_pretrained
// reads (config.json + model.safetensors, or shards with model.safetensors.index.json; in, also
// a single pytorch_model.bin), in and out. The parameter names are transformers' own
// (llama_model.h), so weights map one to one; config.json maps to LlamaShape key by key
// (llama_shape.h):
//
//   model_type                     llama | qwen2 | mistral | mixtral | qwen2_moe | qwen3_moe
//                                  (others: an error naming the file)
//   experts                        num_local_experts / num_experts, num_experts_per_tok,
//                                  moe_intermediate_size, shared_expert_intermediate_size,
//                                  norm_topk_prob, decoder_sparse_step, mlp_only_layers,
//                                  output_router_logits, router_aux_loss_coef (MoeShape); stored
//                                  per expert or fused (hf_experts.h); router_jitter_noise must
//                                  be 0
//   hidden_act                     silu only
//   head_dim                       absent or null: hidden_size / num_attention_heads
//   num_key_value_heads            absent: num_attention_heads
//   rope_parameters, or the older rope_theta + rope_scaling: type default, linear or llama3
//   attention_bias, mlp_bias       Llama's; Qwen2's q/k/v always have biases, Mistral's none
//   sliding_window                 Mistral: every layer; Qwen2: the layers layer_types (or
//                                  use_sliding_window with max_window_layers) marks sliding
//   tie_word_embeddings            no lm_head.weight of ours; the file may still hold an equal one
//
// What the example cannot compute (another activation, partial rotary, rope types such as yarn,
// per-layer rope parameters) is a one-line error naming the file and key, never a silent change.

#include <string>

#include "core/zero/partitioned_init.h"
#include "models/llama/llama_model.h"

namespace zt::models {

// The shape DIR/config.json (or the file `path`) describes.
LlamaShape llama_shape_from_hf_config(const std::string& config_json_path);
// config.json for a model of this shape, which transformers (4.4x and 5.x) reads back to the
// same shape.
std::string hf_llama_config_json(const LlamaShape& shape);

// Whether `dir` holds a config.json and safetensors weights or a pytorch_model.bin.
bool is_hf_directory(const std::string& dir);

// The Hugging Face directory's weights into a model built whole: every parameter from the tensor
// of its name (converted to the parameter's dtype), every tensor taken by a parameter or ignorable
// (a tied lm_head.weight equal to the embedding, rotary inv_freq buffers). Returns the line to log.
std::string load_hf_llama(const std::string& dir, LlamaForCausalLMImpl& model);
// The same into the shards of a model built partitioned with `parts` (every rank calls it, before
// the engine adopts them): each rank copies only its shards' ranges from the mapped files (a
// pytorch_model.bin, which cannot be mapped, is read whole first).
std::string load_hf_llama_shards(const std::string& dir, const LlamaShape& model,
                                 zero::PartitionedInit& parts);
// Throws one line naming `source` when `pretrained` is not the model's architecture.
void check_same_llama(const LlamaShape& model, const LlamaShape& pretrained,
                      const std::string& source);

// A zerotorch checkpoint of the example (any stage, any world size; `tag` "" = latest) as a
// Hugging Face directory: OUT/config.json from the checkpoint's stored `model` block and
// OUT/model.safetensors, the fp32 master weights streamed parameter by parameter; a mixture's
// experts one tensor per expert (save_pretrained's layout) or, `per_expert` false, fused
// (hf_experts.h). Returns a line saying what was written.
std::string export_hf_llama(const std::string& checkpoint_dir, const std::string& tag,
                            const std::string& out_dir, bool per_expert = true);

}  // namespace zt::models
