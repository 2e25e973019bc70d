#include "models/llama/llama_model.h"

#include <map>

#include "base/error.h"
#include "core/zero/call_unit.h"
#include "models/causal_lm_loss.h"
#include "models/tiled_loss.h"
#include "parallel/sequence_exchange.h"

namespace zt::models {

LlamaTrunkImpl::LlamaTrunkImpl(const LlamaShape& s) {
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(s.vocab_size, s.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  norm = register_module("norm", RmsNorm(s.hidden_size, s.rms_norm_eps));
}

LlamaForCausalLMImpl::LlamaForCausalLMImpl(const LlamaShape& shape,
                                           zero::PartitionedInit* partitioned)
    : shape_(shape) {
  shape_.validate("llama");
  if (shape_.is_moe()) {
    stats_ = std::make_shared<RouterStats>();
    stats_->set_recording(shape_.moe.output_router_logits);
  }
  inv_freq_ = rope_inverse_frequencies(shape_);
  model = register_module("model", LlamaTrunk(shape_));
  if (!shape_.tie_word_embeddings) {
    lm_head = register_module(
        "lm_head",
        torch::nn::Linear(
            torch::nn::LinearOptions(shape_.hidden_size, shape_.vocab_size).bias(false)));
  }
  init_weights(*this);  // the root and the head: no layer exists yet
  if (partitioned) {
    // The head first: the root is what no unit added before holds.
    if (lm_head) partitioned->add_unit("lm_head", *lm_head);
    partitioned->add_root(*this);
  }
  for (int64_t i = 0; i < shape_.num_hidden_layers; ++i) {
    LlamaDecoderLayer layer(shape_, i, stats_);
    init_weights(*layer);
    model->layers->push_back(layer);
    if (partitioned) {
      const std::string name = "model.layers." + std::to_string(i);
      if (layer->moe) partitioned->add_unit(name + ".mlp.experts", *layer->moe->experts);
      partitioned->add_unit(name, *layer);
    }
  }
}

void LlamaForCausalLMImpl::init_weights(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.named_parameters()) {
    const std::string& name = p.key();
    torch::Tensor& t = p.value();
    if (name.find("norm") != std::string::npos) continue;  // RMSNorm: ones already
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
      t.zero_();
    } else {
      t.normal_(0.0, 0.02);
    }
  }
}

torch::Tensor LlamaForCausalLMImpl::attention_mask_for(int64_t window, const torch::Tensor& keys,
                                                       int64_t t,
                                                       const torch::TensorOptions& options) {
  const bool windowed = window > 0 && window < t;
  if (!keys.defined() && !windowed) return {};
  torch::Tensor q = torch::arange(t, options.dtype(torch::kLong)).view({t, 1});
  torch::Tensor k = torch::arange(t, options.dtype(torch::kLong)).view({1, t});
  torch::Tensor allowed = k.le(q);
  if (windowed) allowed = allowed & k.gt(q - window);
  allowed = allowed.view({1, 1, t, t});
  return keys.defined() ? allowed & keys : allowed;
}

void LlamaForCausalLMImpl::set_sequence_parallel(std::shared_ptr<dist::Communicator> group,
                                                 std::optional<at::ScalarType> wire) {
  auto split = group && group->size() > 1
                   ? std::make_shared<const SequenceSplit>(SequenceSplit{std::move(group), wire})
                   : nullptr;
  for (const auto& layer : *model->layers) {
    layer->as<LlamaDecoderLayerImpl>()->self_attn->set_sequence_split(split);
  }
  split_ = std::move(split);
}

void LlamaForCausalLMImpl::set_tensor_parallel(std::shared_ptr<dist::Communicator> group) {
  if (!group || group->size() == 1) return;
  ZT_CHECK(!split_, "llama: set_tensor_parallel goes before set_sequence_parallel");
  shape_.check_tensor_split(group->size());
  auto split = std::make_shared<const TensorSplit>(TensorSplit{std::move(group)});
  for (int64_t i = 0; i < shape_.num_hidden_layers; ++i) {
    auto& layer = *model->layers[i]->as<LlamaDecoderLayerImpl>();
    layer.self_attn->set_tensor_split(split);
    layer.mlp->set_tensor_split(split);
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    // Output features (rows of the weight, and the bias) for the projections into the group;
    // input features (columns) for the two out of it.
    for (const char* p : {"self_attn.q_proj.", "self_attn.k_proj.", "self_attn.v_proj.",
                          "mlp.gate_proj.", "mlp.up_proj."}) {
      tensor_split_[prefix + p + "weight"] = 0;
      if (shape_.qkv_bias && std::string(p).rfind("self_attn", 0) == 0) {
        tensor_split_[prefix + p + "bias"] = 0;
      }
      if (shape_.mlp_bias && std::string(p).rfind("mlp", 0) == 0) {
        tensor_split_[prefix + p + "bias"] = 0;
      }
    }
    tensor_split_[prefix + "self_attn.o_proj.weight"] = 1;
    tensor_split_[prefix + "mlp.down_proj.weight"] = 1;
  }
}

void LlamaForCausalLMImpl::set_expert_parallel(std::shared_ptr<dist::Communicator> group) {
  if (!group || group->size() == 1) return;
  shape_.check_expert_split(group->size());
  for (int64_t i = 0; i < shape_.num_hidden_layers; ++i) {
    auto& layer = *model->layers[i]->as<LlamaDecoderLayerImpl>();
    if (!layer.moe) continue;
    layer.moe->experts->set_expert_parallel(group);
    const std::string prefix = "model.layers." + std::to_string(i) + ".mlp.experts.";
    tensor_split_[prefix + "gate_up_proj"] = 0;
    tensor_split_[prefix + "down_proj"] = 0;
  }
}

torch::Tensor LlamaForCausalLMImpl::forward(const torch::Tensor& input_ids,
                                            const torch::Tensor& attention_mask) {
  torch::Tensor x = hidden_states(input_ids, attention_mask);
  if (lm_head) return zt::call_unit(*lm_head, x);
  return at::linear(x, model->embed_tokens->weight);
}

torch::Tensor LlamaForCausalLMImpl::loss_total(const torch::Tensor& input_ids,
                                               const torch::Tensor& attention_mask,
                                               const torch::Tensor& labels) {
  const int64_t tile = shape_.loss_tile_tokens;
  if (tile <= 0) return causal_lm_loss_total(forward(input_ids, attention_mask), labels);
  torch::Tensor x = hidden_states(input_ids, attention_mask);
  if (!lm_head) return tiled_causal_lm_loss_total(x, model->embed_tokens->weight, labels, tile);
  return zt::call_unit_with(
      *lm_head, [&] { return tiled_causal_lm_loss_total(x, lm_head->weight, labels, tile); });
}

torch::Tensor LlamaForCausalLMImpl::hidden_states(const torch::Tensor& input_ids,
                                                  const torch::Tensor& attention_mask) {
  const int64_t b = input_ids.size(0), local = input_ids.size(1);
  const int64_t parts = split_ ? split_->parts() : 1;
  const int64_t t = local * parts;  // the whole sequence's positions
  ZT_CHECK(t <= shape_.max_position_embeddings, "llama: sequence of ", t,
           " tokens exceeds max_position_embeddings ", shape_.max_position_embeddings,
           " (set data.max_length)");
  if (stats_) stats_->begin_forward(attention_mask);
  torch::Tensor x = model->embed_tokens->forward(input_ids);
  if (inv_freq_.device() != x.device()) inv_freq_ = inv_freq_.to(x.device());
  auto [cos, sin] = rope_cos_sin(inv_freq_, t, x.scalar_type());
  torch::Tensor mask_rows = attention_mask;
  if (parts > 1) {
    // Rotary embeddings at this rank's positions; attention sees every key, so the padding mask
    // spans the whole sequence on every rank of the group.
    cos = cos.narrow(1, split_->index() * local, local);
    sin = sin.narrow(1, split_->index() * local, local);
    if (attention_mask.defined()) mask_rows = dist::gather_sequence(attention_mask, *split_->group);
  }
  // The collator pads on the right, so every query row keeps at least its first real key.
  torch::Tensor keys;
  if (mask_rows.defined() && !mask_rows.all().item<bool>()) {
    keys = mask_rows.to(torch::kBool).view({b, 1, 1, t});
  }
  std::map<int64_t, torch::Tensor> masks;  // by window: layers sharing one share its mask
  for (int64_t i = 0; i < shape_.num_hidden_layers; ++i) {
    const int64_t w = shape_.window(i);
    auto it = masks.find(w);
    if (it == masks.end()) {
      it = masks.emplace(w, attention_mask_for(w, keys, t, input_ids.options())).first;
    }
    auto& layer = *model->layers[i]->as<LlamaDecoderLayerImpl>();
    x = zt::call_unit(layer, x, cos, sin, it->second);
  }
  return model->norm->forward(x);
}

torch::Tensor LlamaForCausalLMImpl::loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  return causal_lm_loss(logits, labels);
}

std::pair<double, int64_t> LlamaForCausalLMImpl::loss_sum(const torch::Tensor& logits,
                                                          const torch::Tensor& labels) {
  return causal_lm_loss_sum(logits, labels);
}

void LlamaForCausalLMImpl::set_data_parallel(std::shared_ptr<dist::Communicator> world,
                                             int64_t data_parallel_size) {
  world_ = std::move(world);
  data_parallel_size_ = world_ ? data_parallel_size : 1;
}

torch::Tensor LlamaForCausalLMImpl::router_aux_loss() {
  if (!stats_ || !stats_->recording() || stats_->empty()) return {};
  const double coef = shape_.moe.router_aux_loss_coef;
  const int64_t world = world_ ? world_->size() : 1;
  if (shape_.moe.global_router_aux_loss && world_ && world > 1) {
    // The shares add up, over the world, to the whole batch's loss; the engine divides by dp.
    return stats_->loss(coef * static_cast<double>(data_parallel_size_), world_.get());
  }
  // Each rank's own; the mean over the world ranks (dp of them read whole batches, each split
  // into world / dp sequence parts).
  return stats_->loss(coef * static_cast<double>(data_parallel_size_) / static_cast<double>(world),
                      nullptr);
}

std::vector<std::string> LlamaForCausalLMImpl::unit_names() const {
  std::vector<std::string> names;
  for (int64_t i = 0; i < shape_.num_hidden_layers; ++i) {
    names.push_back("model.layers." + std::to_string(i));
    if (shape_.moe.routes(i)) {
      names.push_back(names.back() + ".mlp.experts");  // a routed unit inside the layer
    }
  }
  if (lm_head) names.push_back("lm_head");
  return names;
}

int64_t LlamaForCausalLMImpl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace zt::models
