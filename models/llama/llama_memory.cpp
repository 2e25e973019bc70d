#include "models/llama/llama_memory.h"

#include <optional>
#include <string>

#include <torch/torch.h>

#include "base/error.h"
#include "models/causal_lm_loss.h"
#include "models/llama/llama_layers.h"
#include "models/llama/llama_model.h"
#include "models/llama/llama_moe.h"
#include "models/load_balancing_loss.h"
#include "models/tiled_loss.h"
#include "parallel/mirror_communicator.h"
#include "parallel/tensor_parallel.h"

namespace zt::models {
namespace {

// The root's computation in LlamaForCausalLMImpl::loss_total with no layers between (a model
// needs one): the embedding, the final norm, the head (the embedding's weight when tied) and
// the loss, whole or a tile of positions at a time.
class RootProbeImpl : public torch::nn::Module {
 public:
  explicit RootProbeImpl(const LlamaShape& shape) : tile_(shape.loss_tile_tokens) {
    embed =
        register_module("embed_tokens", torch::nn::Embedding(shape.vocab_size, shape.hidden_size));
    norm = register_module("norm", RmsNorm(shape.hidden_size, shape.rms_norm_eps));
    if (!shape.tie_word_embeddings) {
      head = register_module(
          "lm_head",
          torch::nn::Linear(
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

}  // namespace

int64_t layer_window(const LlamaShape& shape, int64_t layer, int64_t seq) {
  const int64_t w = shape.window(layer);
  return w > 0 && w < seq ? w : 0;
}

plan::ModelMemory llama_model_memory(const LlamaShape& s, const LlamaRankSplit& split) {
  s.check_tensor_split(split.tensor);
  s.check_expert_split(split.expert);
  const int64_t tp = split.tensor, r = split.tensor_rank;
  // This rank's extent of `size` dealt over the tensor group in `groups` (keep_part in
  // llama_layers.cpp).
  const auto part = [&](int64_t size, int64_t groups) {
    return tp == 1 ? size : dist::split_sizes(size, tp, groups)[static_cast<size_t>(r)];
  };
  plan::ModelMemory m;
  const int64_t c = s.hidden_size, d = s.head_dim;
  const int64_t q = part(s.num_attention_heads * d, s.num_key_value_heads);
  const int64_t kv = part(s.num_key_value_heads * d, s.num_key_value_heads);
  plan::PlannedUnit root{"root", {}, 0, {}};
  root.params.push_back({"model.embed_tokens.weight", s.vocab_size * c});
  for (int64_t i = 0; i < s.num_hidden_layers; ++i) {
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    plan::PlannedUnit layer{prefix.substr(0, prefix.size() - 1), {}, 0, {}};
    const auto add = [&](plan::PlannedUnit& u, const std::string& name, int64_t numel,
                         bool is_split) {
      u.params.push_back({prefix + name, numel, is_split});
    };
    const bool split_tensor = tp > 1;
    add(layer, "self_attn.q_proj.weight", q * c, split_tensor);
    if (s.qkv_bias) add(layer, "self_attn.q_proj.bias", q, split_tensor);
    for (const char* p : {"self_attn.k_proj.", "self_attn.v_proj."}) {
      add(layer, std::string(p) + "weight", kv * c, split_tensor);
      if (s.qkv_bias) add(layer, std::string(p) + "bias", kv, split_tensor);
    }
    add(layer, "self_attn.o_proj.weight", c * q, split_tensor);
    if (s.o_bias) add(layer, "self_attn.o_proj.bias", c, false);
    if (s.qk_norm) {
      add(layer, "self_attn.q_norm.weight", d, false);
      add(layer, "self_attn.k_norm.weight", d, false);
    }
    std::optional<plan::PlannedUnit> experts;
    if (s.moe.routes(i)) {
      const MoeShape& e = s.moe;
      const int64_t local = e.num_experts / std::max(split.expert, 1);
      add(layer, "mlp.gate.weight", e.num_experts * c, false);
      experts = plan::PlannedUnit{prefix + "mlp.experts", {}, 0, {}};
      experts->routed = true;  // MoeExpertsImpl is a zt::RoutedUnit
      add(*experts, "mlp.experts.gate_up_proj", local * 2 * e.intermediate_size * c,
          split.expert > 1);
      add(*experts, "mlp.experts.down_proj", local * c * e.intermediate_size, split.expert > 1);
      if (e.shared_expert_intermediate_size > 0) {
        const int64_t f = e.shared_expert_intermediate_size;
        for (const char* p : {"gate_proj", "up_proj", "down_proj"}) {
          add(layer, std::string("mlp.shared_expert.") + p + ".weight", f * c, false);
        }
        add(layer, "mlp.shared_expert_gate.weight", c, false);
      }
    } else {
      const int64_t f = part(s.intermediate_size, s.intermediate_size);
      for (const char* p : {"mlp.gate_proj.", "mlp.up_proj."}) {
        add(layer, std::string(p) + "weight", f * c, split_tensor);
        if (s.mlp_bias) add(layer, std::string(p) + "bias", f, split_tensor);
      }
      add(layer, "mlp.down_proj.weight", c * f, split_tensor);
      if (s.mlp_bias) add(layer, "mlp.down_proj.bias", c, false);
    }
    add(layer, "input_layernorm.weight", c, false);
    add(layer, "post_attention_layernorm.weight", c, false);
    m.units.push_back(std::move(layer));
    if (experts) m.units.push_back(std::move(*experts));
  }
  root.params.push_back({"model.norm.weight", c});
  if (!s.tie_word_embeddings) {
    m.units.push_back({"lm_head", {{"lm_head.weight", s.vocab_size * c}}, 0, {}});
  }
  m.units.push_back(std::move(root));
  return m;
}

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
  // Drawn on the CPU (whose generator the caller may seed), so a plan is the same wherever it is
  // made: a routed layer's activations follow the routing these values give.
  const at::Tensor x = at::randn({batch, local, shape.hidden_size}, at::TensorOptions())
                           .to(options)
                           .requires_grad_(true);
  auto [cos, sin] = rope_cos_sin(rope_inverse_frequencies(shape).to(device), seq, dtype);
  cos = cos.narrow(1, split.sequence_rank * local, local).contiguous();
  sin = sin.narrow(1, split.sequence_rank * local, local).contiguous();
  auto stats = std::make_shared<RouterStats>();
  stats->set_recording(shape.moe.output_router_logits);
  LlamaProbe probe;
  for (int64_t i = 0; i < shape.num_hidden_layers; ++i) {
    const LlamaProbe::Kind kind{shape.moe.routes(i), layer_window(shape, i, seq)};
    bool seen = false;
    for (const LlamaProbe::Layer& l : probe.layers) seen = seen || l.kind == kind;
    if (seen) continue;
    LlamaDecoderLayer layer(shape, i, stats);
    // Weights as the model draws them (N(0, 0.02); norms stay ones): the router's and experts'
    // are made empty, and the routing follows the router's values.
    for (auto& p : layer->named_parameters()) {
      if (p.key().find("norm") == std::string::npos) p.value().normal_(0.0, 0.02);
    }
    layer->to(device, dtype);
    // The calls LlamaForCausalLMImpl::set_tensor_parallel, set_expert_parallel and
    // set_sequence_parallel make, in that order.
    if (tensor_split) {
      layer->self_attn->set_tensor_split(tensor_split);
      if (layer->mlp) layer->mlp->set_tensor_split(tensor_split);
    }
    if (expert && layer->moe) layer->moe->experts->set_expert_parallel(expert);
    if (sequence_split) layer->self_attn->set_sequence_split(sequence_split);
    // Every position a token (no padding); a window's mask as the model makes it, over the whole
    // sequence, made beforehand: the model's root holds it (LlamaProbe::mask_bytes).
    const at::Tensor mask = LlamaForCausalLMImpl::attention_mask_for(
        kind.window, at::Tensor(), seq, at::TensorOptions().device(device));
    bool window_seen = false;  // the model makes one mask per window, whatever the layer kind
    for (const LlamaProbe::Layer& l : probe.layers) window_seen |= l.kind.window == kind.window;
    if (mask.defined() && !window_seen) probe.mask_bytes += mask.numel() * mask.element_size();
    probe.layers.push_back({kind, layer.ptr(), [layer, x, cos, sin, mask, stats]() mutable {
                              torch::AutoGradMode grad(true);
                              stats->begin_forward(at::Tensor());
                              return layer->forward(x, cos, sin, mask);
                            }});
  }
  RootProbe root(shape);
  root->to(device, dtype);
  const at::Tensor ids =
      at::randint(shape.vocab_size, {batch, local}, at::TensorOptions().dtype(at::kLong))
          .to(device);
  probe.root = root.ptr();
  probe.root_forward = [root, ids]() mutable {
    torch::AutoGradMode grad(true);
    return root->forward(ids);
  };
  return probe;
}

}  // namespace zt::models
