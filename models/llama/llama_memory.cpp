#include "models/llama/llama_memory.h"

#include <torch/torch.h>

#include "base/error.h"
#include "models/llama/llama_layers.h"
#include "models/causal_lm_loss.h"
#include "models/llama/llama_moe.h"
#include "models/load_balancing_loss.h"
#include "models/tiled_loss.h"
#include "parallel/mirror_communicator.h"

namespace zt::models {
namespace {

// The root's computation in LlamaForCausalLMImpl::loss_total with no layers between (a model
// needs one): the embedding, the final norm, the head (the embedding's weight when tied) and
// the loss, whole or a tile of positions at a time.
class RootProbeImpl : public torch::nn::Module {
 public:
  explicit RootProbeImpl(const LlamaShape& shape) : tile_(shape.loss_tile_tokens) {
    embed = register_module("embed_tokens",
                            torch::nn::Embedding(shape.vocab_size, shape.hidden_size));
    norm = register_module("norm", RmsNorm(shape.hidden_size, shape.rms_norm_eps));
    if (!shape.tie_word_embeddings) {
      head = register_module(
          "lm_head", torch::nn::Linear(
                         torch::nn::LinearOptions(shape.hidden_size, shape.vocab_size).bias(false)));
    }
  }
  torch::Tensor forward(const torch::Tensor& ids) {
    const torch::Tensor x = norm->forward(embed->forward(ids));
    const torch::Tensor& w = head ? head->weight : embed->weight;
    if (tile_ > 0) return tiled_causal_lm_loss_total(x, w, ids, tile_);
    return causal_lm_loss_total(at::linear(x, w), ids);
  }
  torch::nn::Embedding embed{nullptr};
  RmsNorm norm{nullptr};
  torch::nn::Linear head{nullptr};

 private:
  int64_t tile_;
};
TORCH_MODULE(RootProbe);

// The first layer of the kind (-1: none).
int64_t first_layer(const LlamaShape& shape, bool routed) {
  for (int64_t i = 0; i < shape.num_hidden_layers; ++i) {
    if (shape.moe.routes(i) == routed) return i;
  }
  return -1;
}

}  // namespace

LlamaProbe make_llama_probe(const LlamaShape& shape, int64_t batch, int64_t seq,
                            const LlamaRankSplit& split, const c10::Device& device,
                            at::ScalarType dtype) {
  ZT_CHECK(seq % split.sequence == 0, "llama probe: ", seq, " tokens do not split over ",
           split.sequence, " sequence ranks");
  torch::NoGradGuard no_grad;
  const auto sequence = dist::mirror_group(split.sequence_rank, split.sequence, device);
  const auto tensor = dist::mirror_group(split.tensor_rank, split.tensor, device);
  const auto expert = dist::mirror_group(split.expert_rank, split.expert, device);
  const auto sequence_split =
      sequence ? std::make_shared<const SequenceSplit>(SequenceSplit{sequence, split.wire})
               : nullptr;
  const auto tensor_split =
      tensor ? std::make_shared<const TensorSplit>(TensorSplit{tensor}) : nullptr;
  const int64_t local = seq / split.sequence;
  const auto options = at::TensorOptions().dtype(dtype).device(device);
  const at::Tensor x = at::randn({batch, local, shape.hidden_size}, options).requires_grad_(true);
  auto [cos, sin] = rope_cos_sin(rope_inverse_frequencies(shape).to(device), seq, dtype);
  cos = cos.narrow(1, split.sequence_rank * local, local).contiguous();
  sin = sin.narrow(1, split.sequence_rank * local, local).contiguous();
  auto stats = std::make_shared<RouterStats>();
  stats->set_recording(shape.moe.output_router_logits);
  LlamaProbe probe;
  for (const bool routed : {false, true}) {
    const int64_t index = first_layer(shape, routed);
    if (index < 0) continue;
    LlamaDecoderLayer layer(shape, index, stats);
    layer->to(device, dtype);
    // The calls LlamaForCausalLMImpl::set_tensor_parallel, set_expert_parallel and
    // set_sequence_parallel make, in that order.
    if (tensor_split) {
      layer->self_attn->set_tensor_split(tensor_split);
      if (layer->mlp) layer->mlp->set_tensor_split(tensor_split);
    }
    if (expert && layer->moe) layer->moe->experts->set_expert_parallel(expert);
    if (sequence_split) layer->self_attn->set_sequence_split(sequence_split);
    // Plain causal attention over every position (no padding, no window): the mask is undefined.
    std::function<at::Tensor()> forward = [layer, x, cos, sin, stats]() mutable {
      torch::AutoGradMode grad(true);
      stats->begin_forward(at::Tensor());
      return layer->forward(x, cos, sin, at::Tensor());
    };
    (routed ? probe.routed : probe.dense) = layer.ptr();
    (routed ? probe.routed_forward : probe.dense_forward) = std::move(forward);
  }
  RootProbe root(shape);
  root->to(device, dtype);
  const at::Tensor ids = at::randint(shape.vocab_size, {batch, local},
                                     at::TensorOptions().dtype(at::kLong).device(device));
  probe.root = root.ptr();
  probe.root_forward = [root, ids]() mutable {
    torch::AutoGradMode grad(true);
    return root->forward(ids);
  };
  return probe;
}

}  // namespace zt::models
