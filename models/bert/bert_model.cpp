#include "models/bert/bert_model.h"

#include "base/error.h"
#include "core/zero/call_unit.h"

namespace zt::models {
namespace {

torch::nn::LayerNorm layer_norm_of(const BertConfig& c) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden_size}).eps(c.layer_norm_eps));
}

// transformers' _init_weights for what `module` holds: Linear and Embedding weights
// N(0, initializer_range), biases zero, an Embedding's padding row zero, LayerNorm ones and
// zeros (as constructed).
void init_weights(torch::nn::Module& module, double std) {
  torch::NoGradGuard no_grad;
  for (auto& m : module.modules(/*include_self=*/false)) {
    if (auto* linear = m->as<torch::nn::LinearImpl>()) {
      linear->weight.normal_(0.0, std);
      linear->bias.zero_();
    } else if (auto* emb = m->as<torch::nn::EmbeddingImpl>()) {
      emb->weight.normal_(0.0, std);
      if (auto pad = emb->options.padding_idx()) emb->weight[*pad].zero_();
    }
  }
}

}  // namespace

BertEmbeddingsImpl::BertEmbeddingsImpl(const BertConfig& c) : config_(c) {
  word_embeddings = register_module(
      "word_embeddings",
      torch::nn::Embedding(
          torch::nn::EmbeddingOptions(c.vocab_size, c.hidden_size).padding_idx(c.pad_token_id)));
  torch::nn::EmbeddingOptions positions(c.max_position_embeddings, c.hidden_size);
  if (c.roberta()) positions.padding_idx(c.pad_token_id);
  position_embeddings = register_module("position_embeddings", torch::nn::Embedding(positions));
  token_type_embeddings = register_module("token_type_embeddings",
                                          torch::nn::Embedding(c.type_vocab_size, c.hidden_size));
  layer_norm = register_module("LayerNorm", layer_norm_of(c));
}

torch::Tensor BertEmbeddingsImpl::forward(const torch::Tensor& input_ids,
                                          const torch::Tensor& token_type_ids) {
  const int64_t t = input_ids.size(1);
  ZT_CHECK(t <= config_.max_length(), config_.model_type, ": a sequence of ", t,
           " tokens exceeds the position table (", config_.max_length(),
           " tokens; set data.max_length)");
  torch::Tensor positions;
  if (config_.roberta()) {
    torch::Tensor real = input_ids.ne(config_.pad_token_id).to(torch::kLong);
    positions = real.cumsum(1) * real + config_.pad_token_id;
  } else {
    positions = torch::arange(t, input_ids.options()).unsqueeze(0);
  }
  torch::Tensor types = token_type_ids.defined() ? token_type_ids : torch::zeros_like(input_ids);
  torch::Tensor x = word_embeddings->forward(input_ids) + token_type_embeddings->forward(types) +
                    position_embeddings->forward(positions);
  return maybe_dropout(layer_norm->forward(x), config_.hidden_dropout_prob, is_training());
}

BertPoolerImpl::BertPoolerImpl(const BertConfig& c) {
  dense = register_module("dense", torch::nn::Linear(c.hidden_size, c.hidden_size));
}

torch::Tensor BertPoolerImpl::forward(const torch::Tensor& h) {
  return torch::tanh(dense->forward(h.select(1, 0)));
}

RobertaClassificationHeadImpl::RobertaClassificationHeadImpl(const BertConfig& c)
    : dropout_(c.classifier_dropout_or_hidden()) {
  dense = register_module("dense", torch::nn::Linear(c.hidden_size, c.hidden_size));
  out_proj = register_module("out_proj", torch::nn::Linear(c.hidden_size, c.num_labels));
}

torch::Tensor RobertaClassificationHeadImpl::forward(const torch::Tensor& h) {
  torch::Tensor x = maybe_dropout(h.select(1, 0), dropout_, is_training());
  x = maybe_dropout(torch::tanh(dense->forward(x)), dropout_, is_training());
  return out_proj->forward(x);
}

BertEncoderModelImpl::BertEncoderModelImpl(const BertConfig& c) {
  embeddings = register_module("embeddings", BertEmbeddings(c));
  encoder = register_module("encoder", BertEncoder());
  if (!c.roberta()) pooler = register_module("pooler", BertPooler(c));
}

BertForSequenceClassificationImpl::BertForSequenceClassificationImpl(
    const BertConfig& c, zero::PartitionedInit* partitioned)
    : config_(c) {
  ZT_CHECK(c.model_type == "bert" || c.model_type == "roberta",
           "bert: model_type must be bert or roberta, got '", c.model_type, "'");
  trunk = register_module(c.prefix(), BertEncoderModel(c));
  if (c.roberta()) {
    roberta_classifier = register_module("classifier", RobertaClassificationHead(c));
  } else {
    classifier = register_module("classifier", torch::nn::Linear(c.hidden_size, c.num_labels));
  }
  init_weights(*this, c.initializer_range);  // the root: no layer exists yet
  if (partitioned) partitioned->add_root(*this);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    BertLayer layer(c);
    init_weights(*layer, c.initializer_range);
    trunk->encoder->layer->push_back(layer);
    if (partitioned) partitioned->add_unit(unit_names()[i], *layer);
  }
}

torch::Tensor BertForSequenceClassificationImpl::hidden(const torch::Tensor& input_ids,
                                                        const torch::Tensor& attention_mask,
                                                        const torch::Tensor& token_type_ids) {
  const int64_t b = input_ids.size(0), t = input_ids.size(1);
  torch::Tensor x = trunk->embeddings->forward(input_ids, token_type_ids);
  // (B, 1, 1, T): every query attends to the real keys.
  torch::Tensor mask = attention_mask.defined()
                           ? attention_mask.to(torch::kBool).view({b, 1, 1, t})
                           : torch::ones({b, 1, 1, t}, input_ids.options().dtype(torch::kBool));
  for (const auto& layer : *trunk->encoder->layer)
    x = zt::call_unit(*layer->as<BertLayerImpl>(), x, mask);
  return x;
}

torch::Tensor BertForSequenceClassificationImpl::forward(const torch::Tensor& input_ids,
                                                         const torch::Tensor& attention_mask,
                                                         const torch::Tensor& token_type_ids) {
  torch::Tensor h = hidden(input_ids, attention_mask, token_type_ids);
  if (config_.roberta()) return roberta_classifier->forward(h);
  torch::Tensor pooled = maybe_dropout(trunk->pooler->forward(h),
                                       config_.classifier_dropout_or_hidden(), is_training());
  return classifier->forward(pooled);
}

std::vector<std::string> BertForSequenceClassificationImpl::unit_names() const {
  std::vector<std::string> names;
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i)
    names.push_back(config_.prefix() + ".encoder.layer." + std::to_string(i));
  return names;
}

int64_t BertForSequenceClassificationImpl::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace zt::models
