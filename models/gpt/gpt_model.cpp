#include "models/gpt/gpt_model.h"

#include <cmath>

#include "base/error.h"
#include "core/zero/call_unit.h"
#include "models/causal_lm_loss.h"
#include "models/tiled_loss.h"

namespace zt::models {

GptImpl::GptImpl(const GptShape& shape, zero::PartitionedInit* partitioned) : shape_(shape) {
  wte = register_module("wte", torch::nn::Embedding(shape.vocab_size, shape.d_model));
  wpe = register_module("wpe", torch::nn::Embedding(shape.max_seq_len, shape.d_model));
  ln_f =
      register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({shape.d_model})));
  if (shape.dropout > 0) drop = register_module("drop", torch::nn::Dropout(shape.dropout));
  blocks = register_module("blocks", torch::nn::ModuleList());
  init_weights(*this, "");  // the root: no block exists yet
  if (partitioned) partitioned->add_root(*this);
  for (int64_t i = 0; i < shape.n_layer; ++i) {
    GptBlock block(shape);
    const std::string name = "blocks." + std::to_string(i);
    init_weights(*block, name);
    blocks->push_back(block);
    if (partitioned) partitioned->add_unit(name, *block);
  }
}

// GPT-2's initialisation: N(0, 0.02) weights, zero biases, and the projections that write into
// the residual stream scaled by 1/sqrt(2 n_layer) so its variance does not grow with depth.
// `prefix`: the module's name in the model ("" for the model itself).
void GptImpl::init_weights(torch::nn::Module& module, const std::string& prefix) const {
  torch::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * shape_.n_layer);
  for (auto& p : module.named_parameters()) {
    const std::string name = prefix.empty() ? p.key() : prefix + "." + p.key();
    torch::Tensor& t = p.value();
    if (name.find("ln") != std::string::npos) continue;  // LayerNorm: ones and zeros already
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
      t.zero_();
    } else if (name.find("attn.proj.weight") != std::string::npos ||
               name.find(".out.weight") != std::string::npos) {
      t.normal_(0.0, residual_std);
    } else {
      t.normal_(0.0, 0.02);
    }
  }
}

torch::Tensor GptImpl::forward(const torch::Tensor& input_ids,
                               const torch::Tensor& attention_mask) {
  // Tied head: the token embedding doubles as the output projection.
  return at::linear(hidden(input_ids, attention_mask), wte->weight);
}

torch::Tensor GptImpl::hidden(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  const int64_t b = input_ids.size(0), t = input_ids.size(1);
  ZT_CHECK(t <= shape_.max_seq_len, "gpt: sequence of ", t, " tokens exceeds model.max_seq_len ",
           shape_.max_seq_len, " (set data.max_length <= max_seq_len)");
  torch::Tensor pos = torch::arange(t, input_ids.options());
  torch::Tensor x = wte->forward(input_ids) + wpe->forward(pos);
  if (drop) x = drop->forward(x);
  // (B, 1, T, T): causal AND the key is a real token. A query always sees itself or an earlier
  // real token (the collator pads on the right), so no row is fully masked. Without causal:
  // (B, 1, 1, T), every real key. Without attention_mask: no mask tensor, and the blocks attend
  // causally (lets SDPA pick its flash kernel on a GPU).
  torch::Tensor mask;
  if (!attention_mask.defined()) {
    ZT_CHECK(shape_.causal, "gpt: the bidirectional encoder needs an attention_mask");
  } else {
    torch::Tensor keys = attention_mask.to(torch::kBool).view({b, 1, 1, t});
    mask = keys;
    if (shape_.causal) {
      torch::Tensor causal = torch::ones({t, t}, input_ids.options().dtype(torch::kBool)).tril();
      mask = causal.view({1, 1, t, t}) & keys;
    }
  }
  for (const auto& block : *blocks) x = zt::call_unit(*block->as<GptBlockImpl>(), x, mask);
  return ln_f->forward(x);
}

torch::Tensor GptImpl::loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  return models::causal_lm_loss(logits, labels);
}

torch::Tensor GptImpl::causal_lm_loss(const torch::Tensor& input_ids,
                                      const torch::Tensor& attention_mask,
                                      const torch::Tensor& labels) {
  const int64_t tile = shape_.loss_tile_tokens;
  if (tile <= 0) return loss(forward(input_ids, attention_mask), labels);
  // The count stays on the device (no host synchronisation); no token at all gives NaN, as the
  // untiled mean does.
  const torch::Tensor tokens = labels.ne(-100).sum().to(torch::kFloat);
  return tiled_causal_lm_loss_total(hidden(input_ids, attention_mask), wte->weight, labels, tile) /
         tokens;
}

std::pair<double, int64_t> GptImpl::loss_sum(const torch::Tensor& logits,
                                             const torch::Tensor& labels) {
  return causal_lm_loss_sum(logits, labels);
}

std::vector<std::string> GptImpl::unit_names() const {
  std::vector<std::string> names;
  for (int64_t i = 0; i < shape_.n_layer; ++i) names.push_back("blocks." + std::to_string(i));
  return names;
}

int64_t GptImpl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace zt::models
