#pragma once
// The LLaMA family as the memory plan sees it: its units' parameter sizes at a rank's split, and
// the pieces for an activation probe (train/activation_probe.h), the memory
// plan's measure of one micro-batch's activations (core/plan/memory_plan.h): one decoder layer
// of each kind the model has (dense or routed for a mixture of experts, and the window it
// attends through) and the root (a model without layers: embeddings, the final norm, the head
// and the loss), on the device in the compute dtype, with inputs of `batch` sequences of `seq`
// tokens made beforehand. The root is its computation without the model (a model has at least one
// layer).
//
// Under a split the pieces are one rank's part of it: its T / sp positions, its heads and MLP
// features under a tensor split, its experts under an expert split, set by the same calls the
// model's set_*_parallel make, over mirror groups (parallel/mirror_communicator.h) that give the
// exchanges their real shapes and buffers without other processes. A routed layer's exchange
// receives as many rows as it sends (balanced routing).

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include "core/plan/memory_plan.h"
#include "models/llama/llama_shape.h"

namespace zt::models {

// The rank's place in each split (sizes of 1: none); `wire`: the sequence exchange's dtype.
struct LlamaRankSplit {
  int sequence = 1, sequence_rank = 0;
  int tensor = 1, tensor_rank = 0;
  int expert = 1, expert_rank = 0;
  std::optional<at::ScalarType> wire;
};

// The units and parameter sizes of the model `split` gives a rank (llama_model.h unit_names, each
// parameter in the innermost unit holding it, in the module's order, split ones flagged), from
// the shape alone: what train/memory_check.h model_memory reads from the built and split model,
// without building it. No activations.
plan::ModelMemory llama_model_memory(const LlamaShape& shape, const LlamaRankSplit& split);

// The window a layer attends through at `seq` tokens: 0 where it sees every earlier position
// (no window, or one at least as long as the sequence: the model makes no mask then).
int64_t layer_window(const LlamaShape& shape, int64_t layer, int64_t seq);

struct LlamaProbe {
  // What a layer's activations depend on besides the batch: routed or dense, and its window.
  struct Kind {
    bool routed = false;
    int64_t window = 0;
    bool operator==(const Kind& o) const { return routed == o.routed && window == o.window; }
  };
  struct Layer {
    Kind kind;
    std::shared_ptr<torch::nn::Module> module;
    std::function<at::Tensor()> forward;
  };
  std::vector<Layer> layers;  // one of each kind the model has, in the order of its first layer
  std::shared_ptr<torch::nn::Module> root;
  std::function<at::Tensor()> root_forward;
  // The windows' masks ((1, 1, T, T) bool each) the model keeps from its forward to the end of
  // its backward; not in any probe.
  int64_t mask_bytes = 0;
};

// seq: the whole sequence's tokens, a multiple of split.sequence.
LlamaProbe make_llama_probe(const LlamaShape& shape, int64_t batch, int64_t seq,
                            const LlamaRankSplit& split, const c10::Device& device,
                            at::ScalarType dtype);

}  // namespace zt::models
