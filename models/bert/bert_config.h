#pragma once
// The BERT example's shape, as Hugging Face's config.json states it (transformers' BertConfig and
// RobertaConfig, model_type "bert" or "roberta"), in and out.
//
// What our encoder computes (bert_model.h) is what transformers' BertForSequenceClassification /
// RobertaForSequenceClassification compute for these keys; a config asking for something else
// (another position embedding type, a decoder, cross attention, an activation other than exact
// GELU) is refused with one line naming the file and the key, rather than loaded into a model
// that would compute another function.

#include <cstdint>
#include <string>

namespace zt::models {

struct BertConfig {
  std::string model_type = "bert";  // "bert" or "roberta": parameter prefix, positions, head
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  int64_t pad_token_id = 0;  // RoBERTa: its positions start at pad_token_id + 1
  int64_t num_labels = 2;    // 1: regression
  double layer_norm_eps = 1e-12;
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  double classifier_dropout = -1;  // < 0: null in config.json, hidden_dropout_prob applies
  double initializer_range = 0.02;
  // Ours, not Hugging Face's: each encoder layer keeps only its input for backward and runs again
  // there (the program's `model.activation_checkpointing`; core/activations).
  bool activation_checkpointing = false;

  bool roberta() const { return model_type == "roberta"; }
  // The parameter-name prefix of the encoder: "bert" or "roberta".
  const std::string& prefix() const { return model_type; }
  double classifier_dropout_or_hidden() const {
    return classifier_dropout >= 0 ? classifier_dropout : hidden_dropout_prob;
  }
  // The longest input the position table allows (RoBERTa's positions skip pad_token_id + 1).
  int64_t max_length() const {
    return roberta() ? max_position_embeddings - pad_token_id - 1 : max_position_embeddings;
  }
};

// Reads a config.json (path for messages and reading). Throws one zt::Error naming the file and
// the key for a missing or unsupported one.
BertConfig read_bert_config(const std::string& config_json_path);
// The same from the JSON text itself; `where` names it in messages.
BertConfig parse_bert_config(const std::string& json, const std::string& where);

// config.json for transformers (AutoModelForSequenceClassification and the model_type's
// *ForSequenceClassification): architectures, labels (problem_type "regression" for one label,
// "single_label_classification" otherwise), and every key above.
std::string bert_config_json(const BertConfig& config);

}  // namespace zt::models
