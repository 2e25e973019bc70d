#pragma once
// The BERT example's model: transformers' BertForSequenceClassification or
// RobertaForSequenceClassification (BertConfig::model_type), with Hugging Face's parameter names
// as its own, so a model directory maps onto it name for name (hf_bert.h). For model_type bert:
//
//   bert.embeddings.{word_embeddings,position_embeddings,token_type_embeddings}.weight
//   bert.embeddings.LayerNorm.{weight,bias}
//   bert.encoder.layer.<i>.attention.self.{query,key,value}.{weight,bias}
//   bert.encoder.layer.<i>.attention.output.{dense,LayerNorm}.{weight,bias}
//   bert.encoder.layer.<i>.intermediate.dense.{weight,bias}
//   bert.encoder.layer.<i>.output.{dense,LayerNorm}.{weight,bias}
//   bert.pooler.dense.{weight,bias}                 tanh(dense(h[:, 0]))
//   classifier.{weight,bias}                        (num_labels, C)
//
// RoBERTa: "roberta." instead of "bert.", no pooler, and the head is classifier.dense (tanh)
// then classifier.out_proj, on h[:, 0]; position ids count the non-pad tokens from
// pad_token_id + 1 (transformers' create_position_ids_from_input_ids), so a pad id anywhere
// takes position pad_token_id and does not advance the count.
//
// Stage-3 units: "<prefix>.encoder.layer.<i>" (unit_names()); embeddings, pooler and head form
// the root unit. Construction draws and initialises the root, then layer by layer (as
// transformers' _init_weights: N(0, initializer_range) weights, zero biases, the embeddings' pad
// row zero), handing each to a PartitionedInit when given, so that a partitioned build holds the
// same values as a whole one with the same seed.

#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/zero/partitioned_init.h"
#include "models/bert/bert_config.h"
#include "models/bert/bert_layer.h"

namespace zt::models {

class BertEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit BertEmbeddingsImpl(const BertConfig& config);
  // input_ids (B, T) int64, token_type_ids (B, T) int64 or undefined (zeros) -> (B, T, C).
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& token_type_ids);

  torch::nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr},
      token_type_embeddings{nullptr};
  torch::nn::LayerNorm layer_norm{nullptr};  // "LayerNorm"

 private:
  BertConfig config_;
};
TORCH_MODULE(BertEmbeddings);

class BertEncoderImpl : public torch::nn::Module {
 public:
  BertEncoderImpl() { layer = register_module("layer", torch::nn::ModuleList()); }
  torch::nn::ModuleList layer{nullptr};  // BertLayer, added by BertForSequenceClassification
};
TORCH_MODULE(BertEncoder);

// tanh(dense(h[:, 0])): BERT's pooled [CLS] representation.
class BertPoolerImpl : public torch::nn::Module {
 public:
  explicit BertPoolerImpl(const BertConfig& config);
  torch::Tensor forward(const torch::Tensor& h);
  torch::nn::Linear dense{nullptr};
};
TORCH_MODULE(BertPooler);

// RoBERTa's head: out_proj(dropout(tanh(dense(dropout(h[:, 0]))))).
class RobertaClassificationHeadImpl : public torch::nn::Module {
 public:
  explicit RobertaClassificationHeadImpl(const BertConfig& config);
  torch::Tensor forward(const torch::Tensor& h);
  torch::nn::Linear dense{nullptr}, out_proj{nullptr};

 private:
  double dropout_;
};
TORCH_MODULE(RobertaClassificationHead);

// The encoder: "bert" or "roberta" in the model.
class BertEncoderModelImpl : public torch::nn::Module {
 public:
  explicit BertEncoderModelImpl(const BertConfig& config);
  BertEmbeddings embeddings{nullptr};
  BertEncoder encoder{nullptr};
  BertPooler pooler{nullptr};  // null for RoBERTa
};
TORCH_MODULE(BertEncoderModel);

class BertForSequenceClassificationImpl : public torch::nn::Module {
 public:
  // `partitioned`: ZeRO stage 3's partitioned construction (zt::Launch::partitioned). Null:
  // built whole.
  explicit BertForSequenceClassificationImpl(const BertConfig& config,
                                             zero::PartitionedInit* partitioned = nullptr);

  // input_ids (B, T) int64; attention_mask (B, T) int64, 1 = token, 0 = pad (undefined: no
  // padding); token_type_ids (B, T) int64 or undefined (zeros) -> logits (B, num_labels) in the
  // compute dtype.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                        const torch::Tensor& token_type_ids = {});
  // The last layer's output (B, T, C).
  torch::Tensor hidden(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                       const torch::Tensor& token_type_ids = {});

  std::vector<std::string> unit_names() const;
  const BertConfig& config() const { return config_; }
  int64_t num_parameters() const;

  BertEncoderModel trunk{nullptr};                        // "bert" or "roberta"
  torch::nn::Linear classifier{nullptr};                  // BERT's head, "classifier"
  RobertaClassificationHead roberta_classifier{nullptr};  // RoBERTa's head, "classifier"

 private:
  BertConfig config_;
};
TORCH_MODULE(BertForSequenceClassification);

}  // namespace zt::models
