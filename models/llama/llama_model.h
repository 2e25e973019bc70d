#pragma once
// A LLaMA-family causal language model (Llama 2/3, Qwen2, Mistral, SmolLM, and the mixtures of
// experts Mixtral, Qwen2-MoE, Qwen3-MoE: llama_shape.h), with
// transformers' LlamaForCausalLM parameter names, so a Hugging Face checkpoint maps one to one
// (hf_llama.h):
//
//   model.embed_tokens.weight (V, C), model.layers.<i>.* (llama_layers.h), model.norm.weight,
//   lm_head.weight (V, C), absent when tie_word_embeddings (the head is embed_tokens)
//
// Stage-3 units (unit_names()): every decoder layer "model.layers.<i>", inside a routed layer
// its experts "model.layers.<i>.mlp.experts" (a routed unit: only the experts some rank routed
// to are gathered, core/zero/call_unit.h), and, when the head is untied, "lm_head" (for a 128k
// vocabulary the largest matrix, gathered only around its call);
// the embedding and final norm form the root unit. A tied head stays in the root with the
// embedding it shares.
//
// Construction consumes the RNG root first (embedding, norm, head), then layer by layer, so a
// partitioned build (core/zero/partitioned_init.h) holds the same values as a whole one.

#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/zero/partitioned_init.h"
#include "models/llama/llama_layers.h"
#include "models/load_balancing_loss.h"

namespace zt::models {

// The trunk, registered as `model` to give transformers' names.
class LlamaTrunkImpl : public torch::nn::Module {
 public:
  explicit LlamaTrunkImpl(const LlamaShape& shape);
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RmsNorm norm{nullptr};
};
TORCH_MODULE(LlamaTrunk);

class LlamaForCausalLMImpl : public torch::nn::Module {
 public:
  // `partitioned`: build for ZeRO stage 3, each part handed over once initialised; null: whole.
  explicit LlamaForCausalLMImpl(const LlamaShape& shape,
                                zero::PartitionedInit* partitioned = nullptr);

  // input_ids (B, T) int64, attention_mask (B, T) (1 = token, 0 = right padding) or undefined ->
  // logits (B, T, V) in the compute dtype. Positions are 0..T-1 in every row, as transformers
  // numbers them when given no position ids. Under a sequence split each rank passes its T / sp
  // consecutive positions (data/sequence_split.h) and gets their logits; rank r's positions are
  // r T/sp .. (r+1) T/sp - 1.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);

  // Ulysses sequence parallelism over `group` (the topology's sequence group; null: none): every
  // layer's attention exchanges heads for positions (llama_layers.h). Throws naming the head
  // counts when they do not split over the group.
  void set_sequence_parallel(std::shared_ptr<dist::Communicator> group,
                             std::optional<at::ScalarType> wire = std::nullopt);

  // Tensor parallelism over `group` (the topology's tensor group; null: none), before the engine
  // is built and before set_sequence_parallel: each rank keeps its slices of every layer's
  // projections (llama_layers.h, TensorSplit); embeddings, norms and the head stay whole. Throws
  // naming the counts that do not divide.
  void set_tensor_parallel(std::shared_ptr<dist::Communicator> group);
  // Expert parallelism over `group` (the topology's expert group; null: none), before the engine
  // is built: each routed layer keeps its rank's E / ep experts (llama_moe.h). Throws naming the
  // counts when ep does not divide the experts, or for a model without experts.
  void set_expert_parallel(std::shared_ptr<dist::Communicator> group);
  // The parameters each rank of the tensor (expert) group holds a different slice of, with the
  // dimension split (the engine's EngineOptions::tensor_split_params); empty without either.
  const std::map<std::string, int64_t>& tensor_split_parameters() const { return tensor_split_; }
  // The sum of the token losses (fp32) over labels != -100, labels (B, T) shifted as forward's
  // positions: forward and causal_lm_loss_total, or with the shape's loss_tile_tokens the head
  // and loss a tile of positions at a time (models/tiled_loss.h), never holding the whole logits.
  torch::Tensor loss_total(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                           const torch::Tensor& labels);
  // Mean cross-entropy (fp32) over labels != -100; logits (B, T, V), labels (B, T).
  static torch::Tensor loss(const torch::Tensor& logits, const torch::Tensor& labels);
  // Sum of the token losses and the number of tokens counted.
  static std::pair<double, int64_t> loss_sum(const torch::Tensor& logits,
                                             const torch::Tensor& labels);

  // Mixtures of experts with output_router_logits (llama_shape.h MoeShape): router_aux_loss_coef
  // times the load-balancing loss of the last forward (models/load_balancing_loss.h), as the term
  // a rank adds to what it backpropagates: the engine's gradient average (sum over ranks, 1/dp)
  // then gives the gradient of coef times the loss of the union of the data-parallel ranks'
  // tokens (global_router_aux_loss) or of the mean of each rank's own loss (transformers'). An
  // undefined tensor when the model adds none. Global: collective over the set_data_parallel
  // world.
  torch::Tensor router_aux_loss();
  // The ranks whose micro-batches make up a step, each once, and how many batches they read (the
  // topology's batch group and data_parallel_size()); null: one process.
  void set_data_parallel(std::shared_ptr<dist::Communicator> world, int64_t data_parallel_size);

  std::vector<std::string> unit_names() const;
  const LlamaShape& shape() const { return shape_; }
  int64_t num_parameters() const;

  LlamaTrunk model{nullptr};
  torch::nn::Linear lm_head{nullptr};  // null when tied

  // (B or 1, 1, T, T) bool for a layer's window and the padding (keys (B, 1, 1, T) bool, or
  // undefined for none); undefined when plain causal attention computes the same. The model
  // makes one per distinct window each forward and the layers keep it to their backward.
  static torch::Tensor attention_mask_for(int64_t window, const torch::Tensor& keys, int64_t t,
                                          const torch::TensorOptions& options);

 private:
  // N(0, initializer_range 0.02) for linear and embedding weights, zero biases, RMSNorm ones:
  // transformers' LlamaPreTrainedModel._init_weights.
  static void init_weights(torch::nn::Module& module);
  // The trunk: the final norm's output (B, T, C) for forward's inputs.
  torch::Tensor hidden_states(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);

  LlamaShape shape_;
  std::shared_ptr<RouterStats> stats_;  // the routed layers' (null for a dense model)
  std::shared_ptr<dist::Communicator> world_;
  int64_t data_parallel_size_ = 1;
  std::shared_ptr<const SequenceSplit> split_;
  std::map<std::string, int64_t> tensor_split_;
  torch::Tensor inv_freq_;  // fp32 (head_dim / 2), not a parameter or buffer: derived from shape
};
TORCH_MODULE(LlamaForCausalLM);

}  // namespace zt::models
