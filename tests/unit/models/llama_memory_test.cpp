// models/llama/llama_memory.h: the units and parameter sizes computed from a LLaMA-family shape
// at a rank's split are those of the model built and split (read by train/memory_check.h
// model_memory): every unit (routed or not), every parameter's name, order, size and split
// flag, for Llama with biases and a tied head, a tensor split that divides and one that
// does not (the first ranks keep one more head and feature), Mixtral, Qwen2-MoE's shared expert
// and dense layers, and Qwen3-MoE's q/k norms, under an expert split.
#include "models/llama/llama_memory.h"

#include <set>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/llama/llama_model.h"
#include "parallel/mirror_communicator.h"
#include "train/memory_check.h"

namespace zt::models {
namespace {

LlamaShape small(const std::string& type) {
  LlamaShape s;
  s.model_type = type;
  s.vocab_size = 50;
  s.hidden_size = 24;
  s.intermediate_size = 40;
  s.num_hidden_layers = 3;
  s.num_attention_heads = 6;
  s.num_key_value_heads = 3;
  s.head_dim = 4;
  s.max_position_embeddings = 16;
  if (type != "llama") {
    s.moe.num_experts = 4;
    s.moe.intermediate_size = 8;
  }
  return s;
}

LlamaRankSplit tensor(int parts, int rank) {
  LlamaRankSplit s;
  s.tensor = parts;
  s.tensor_rank = rank;
  return s;
}

LlamaRankSplit experts(int parts, int rank) {
  LlamaRankSplit s;
  s.expert = parts;
  s.expert_rank = rank;
  return s;
}

void expect_same_as_built(const LlamaShape& shape, const LlamaRankSplit& split) {
  const c10::Device cpu(c10::kCPU);
  LlamaForCausalLM model(shape);
  model->set_tensor_parallel(dist::mirror_group(split.tensor_rank, split.tensor, cpu));
  model->set_expert_parallel(dist::mirror_group(split.expert_rank, split.expert, cpu));
  std::set<std::string> names;
  for (const auto& kv : model->tensor_split_parameters()) names.insert(kv.first);
  const plan::ModelMemory built = train::model_memory(*model, model->unit_names(), names);
  const plan::ModelMemory computed = llama_model_memory(shape, split);
  ASSERT_EQ(computed.units.size(), built.units.size());
  for (size_t u = 0; u < built.units.size(); ++u) {
    SCOPED_TRACE(built.units[u].name);
    EXPECT_EQ(computed.units[u].name, built.units[u].name);
    EXPECT_EQ(computed.units[u].routed, built.units[u].routed);
    ASSERT_EQ(computed.units[u].params.size(), built.units[u].params.size());
    for (size_t i = 0; i < built.units[u].params.size(); ++i) {
      const plan::PlannedParam& a = computed.units[u].params[i];
      const plan::PlannedParam& b = built.units[u].params[i];
      EXPECT_EQ(a.name, b.name);
      EXPECT_EQ(a.numel, b.numel) << b.name;
      EXPECT_EQ(a.split, b.split) << b.name;
    }
  }
}

TEST(LlamaMemory, UnitsAndSizesAreThoseOfTheBuiltModel) {
  LlamaShape llama = small("llama");
  llama.qkv_bias = llama.o_bias = llama.mlp_bias = true;
  expect_same_as_built(llama, {});
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(r);
    expect_same_as_built(llama, tensor(3, r));
    // 3 key/value heads and 40 features over 2 ranks: 2 + 1 heads, 20 + 20 features.
    if (r < 2) expect_same_as_built(llama, tensor(2, r));
  }
  llama.tie_word_embeddings = true;
  expect_same_as_built(llama, tensor(2, 1));

  LlamaShape mixtral = small("mixtral");
  expect_same_as_built(mixtral, {});
  expect_same_as_built(mixtral, experts(2, 1));
  LlamaShape qwen2 = small("qwen2_moe");
  qwen2.moe.shared_expert_intermediate_size = 12;
  qwen2.moe.mlp_only_layers = {1};
  qwen2.qkv_bias = true;
  expect_same_as_built(qwen2, experts(4, 3));
  LlamaShape qwen3 = small("qwen3_moe");
  qwen3.qk_norm = true;
  qwen3.moe.decoder_sparse_step = 2;
  expect_same_as_built(qwen3, experts(2, 0));
}

}  // namespace
}  // namespace zt::models
