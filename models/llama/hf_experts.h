#pragma once
// The experts of Mixtral, Qwen2-MoE and Qwen3-MoE as Hugging Face checkpoints store them, against
// the fused parameters the model holds (llama_moe.h):
//
//   model (transformers 5 in memory)     per expert (what save_pretrained writes, 4.x and 5.x)
//   mlp.experts.gate_up_proj (E, 2I, C)  mlp.experts.<e>.gate_proj.weight (I, C), then
//                                        mlp.experts.<e>.up_proj.weight (I, C), for e = 0..E-1
//   mlp.experts.down_proj (E, C, I)      mlp.experts.<e>.down_proj.weight (C, I)
//   Mixtral                              block_sparse_moe.* for mlp.*; w1 = gate, w3 = up, w2 =
//   down
//
// Each stored tensor is one contiguous run of the fused parameter's elements, so a rank reads its
// shard's range straight from the per-expert tensors (PerExpertWeights) and an export writes the
// runs under their names (consolidate_to_safetensors' StoredLayout).

#include <functional>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "weights/shard_weight_source.h"

namespace zt::models {

// The per-expert tensors parameter `name` (shape) is stored as, in order; none for a parameter
// stored under its own name. model_type: mixtral, qwen2_moe or qwen3_moe (others: none).
std::vector<StoredPiece> per_expert_pieces(const std::string& model_type, const std::string& name,
                                           const std::vector<int64_t>& shape);

// A source over either layout: a parameter whose own name `stored` finds is read as it is, else
// from its per-expert pieces.
class PerExpertWeights : public zero::ShardWeightSource {
 public:
  // `where`: the files, for the error naming an expert they lack.
  PerExpertWeights(zero::ShardWeightSource& inner, std::function<bool(const std::string&)> stored,
                   std::string model_type, std::string where);
  void fill(const std::string& name, at::IntArrayRef shape, int64_t begin,
            const at::Tensor& dst) override;

 private:
  zero::ShardWeightSource& inner_;
  std::function<bool(const std::string&)> stored_;
  std::string model_type_, where_;
};

}  // namespace zt::models
