#pragma once
// The GPT as the memory plan sees it (core/plan/memory_plan.h): its units' parameter sizes, and
// the pieces an activation probe runs (train/activation_probe.h) at one micro-batch's shape.
//
//   gpt_model_memory(shape)   blocks.0 .. blocks.{n-1}, then the root (wte, wpe, ln_f), their
//                             parameters' element counts in the modules' order; no activations
//   GptProbe                  one block and the root (a GPT of no blocks: embeddings, ln_f, the
//                             tied head and the loss), on the device in the compute dtype, with
//                             inputs of `batch` sequences of `seq` tokens made beforehand

#include <functional>
#include <memory>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include "core/plan/memory_plan.h"
#include "models/gpt/gpt_block.h"

namespace zt::models {

plan::ModelMemory gpt_model_memory(const GptShape& shape);

struct GptProbe {
  std::shared_ptr<torch::nn::Module> block, root;
  std::function<at::Tensor()> block_forward, root_forward;
};

GptProbe make_gpt_probe(const GptShape& shape, int64_t batch, int64_t seq,
                        const c10::Device& device, at::ScalarType dtype);

}  // namespace zt::models
