#include "models/gpt/gpt_memory.h"

#include <torch/torch.h>

#include "models/causal_lm_loss.h"
#include "models/gpt/gpt_model.h"

namespace zt::models {

plan::ModelMemory gpt_model_memory(const GptShape& shape) {
  plan::ModelMemory m;
  // One block built to read its parameter sizes (every block has the same).
  GptBlock block(shape);
  for (int64_t i = 0; i < shape.n_layer; ++i) {
    const std::string name = "blocks." + std::to_string(i);
    plan::PlannedUnit unit{name, {}, 0, {}};
    for (const auto& p : block->named_parameters()) {
      unit.params.push_back({name + "." + p.key(), p.value().numel()});
    }
    m.units.push_back(std::move(unit));
  }
  const int64_t d = shape.d_model;
  m.units.push_back({"root",
                     {{"wte.weight", shape.vocab_size * d},
                      {"wpe.weight", shape.max_seq_len * d},
                      {"ln_f.weight", d},
                      {"ln_f.bias", d}},
                     0,
                     {}});
  return m;
}

GptProbe make_gpt_probe(const GptShape& shape, int64_t batch, int64_t seq,
                        const c10::Device& device, at::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  GptProbe probe;
  GptBlock block(shape);
  block->to(device, dtype);
  const auto ids_options = at::TensorOptions().dtype(at::kLong).device(device);
  const at::Tensor x =
      at::randn({batch, seq, shape.d_model}, at::TensorOptions().dtype(dtype).device(device))
          .requires_grad_(true);
  // The mask GptImpl::hidden makes from an attention mask (causal AND real key).
  at::Tensor mask =
      at::ones({seq, seq}, ids_options.dtype(at::kBool)).tril().view({1, 1, seq, seq});
  if (!shape.causal) mask = at::ones({batch, 1, 1, seq}, ids_options.dtype(at::kBool));
  mask = mask.expand({batch, 1, -1, seq}).contiguous();
  probe.block = block.ptr();
  probe.block_forward = [block, x, mask]() mutable {
    torch::AutoGradMode grad(true);
    return block->forward(x, mask);
  };
  GptShape head = shape;
  head.n_layer = 0;
  Gpt root(head);
  root->to(device, dtype);
  const at::Tensor ids = at::randint(shape.vocab_size, {batch, seq}, ids_options);
  const at::Tensor attention = at::ones({batch, seq}, ids_options);
  probe.root = root.ptr();
  probe.root_forward = [root, ids, attention]() mutable {
    torch::AutoGradMode grad(true);
    return root->causal_lm_loss(ids, attention, ids);
  };
  return probe;
}

}  // namespace zt::models
