#include "models/bert/bert_config.h"

#include <fstream>
#include <sstream>
#include <utility>
#include <yaml-cpp/yaml.h>

#include "base/error.h"

namespace zt::models {

BertConfig read_bert_config(const std::string& path) {
  std::ifstream in(path);
  ZT_CHECK(in.good(), "cannot read ", path);
  std::stringstream s;
  s << in.rdbuf();
  return parse_bert_config(s.str(), path);
}

BertConfig parse_bert_config(const std::string& json, const std::string& where) {
  YAML::Node c;
  try {
    c = YAML::Load(json);  // JSON is YAML
  } catch (const YAML::Exception& e) {
    ZT_THROW(where, ": not valid JSON: ", e.what());
  }
  ZT_CHECK(c.IsMap(), where, ": not a JSON object");
  auto has = [&](const char* k) { return c[k] && !c[k].IsNull(); };
  auto get = [&](const char* k, auto& value) {
    if (!has(k)) return;
    try {
      value = c[k].as<std::remove_reference_t<decltype(value)>>();
    } catch (const YAML::Exception&) {
      ZT_THROW(where, ": ", k, " has the wrong type (", YAML::Dump(c[k]), ")");
    }
  };
  BertConfig b;
  ZT_CHECK(has("model_type"), where, ": missing model_type (the BERT example reads bert, roberta)");
  get("model_type", b.model_type);
  ZT_CHECK(b.model_type == "bert" || b.model_type == "roberta", where, ": model_type is '",
           b.model_type, "'; the BERT example reads bert and roberta");
  if (b.roberta()) b.pad_token_id = 1;  // RobertaConfig's default
  for (const char* k : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                        "intermediate_size"}) {
    ZT_CHECK(has(k), where, ": missing ", k);
  }
  get("vocab_size", b.vocab_size);
  get("hidden_size", b.hidden_size);
  get("num_hidden_layers", b.num_hidden_layers);
  get("num_attention_heads", b.num_attention_heads);
  get("intermediate_size", b.intermediate_size);
  get("max_position_embeddings", b.max_position_embeddings);
  get("type_vocab_size", b.type_vocab_size);
  get("pad_token_id", b.pad_token_id);
  get("layer_norm_eps", b.layer_norm_eps);
  get("hidden_dropout_prob", b.hidden_dropout_prob);
  get("attention_probs_dropout_prob", b.attention_probs_dropout_prob);
  get("classifier_dropout", b.classifier_dropout);
  get("initializer_range", b.initializer_range);
  // transformers derives num_labels from id2label when the file does not state it.
  if (has("num_labels")) {
    get("num_labels", b.num_labels);
  } else if (has("id2label")) {
    ZT_CHECK(c["id2label"].IsMap(), where, ": id2label is not an object");
    b.num_labels = static_cast<int64_t>(c["id2label"].size());
  }
  const std::pair<const char*, int64_t> sizes[] = {
      {"vocab_size", b.vocab_size},
      {"hidden_size", b.hidden_size},
      {"num_hidden_layers", b.num_hidden_layers},
      {"num_attention_heads", b.num_attention_heads},
      {"intermediate_size", b.intermediate_size},
      {"max_position_embeddings", b.max_position_embeddings},
      {"type_vocab_size", b.type_vocab_size}};
  for (const auto& [k, v] : sizes) ZT_CHECK(v >= 1, where, ": ", k, " must be >= 1, got ", v);
  ZT_CHECK(b.num_labels >= 1, where, ": id2label is empty (num_labels must be >= 1)");
  ZT_CHECK(b.hidden_size % b.num_attention_heads == 0, where, ": hidden_size ", b.hidden_size,
           " is not divisible by num_attention_heads ", b.num_attention_heads);
  ZT_CHECK(b.pad_token_id >= 0 && b.pad_token_id < b.vocab_size, where, ": pad_token_id ",
           b.pad_token_id, " is outside the vocabulary [0, ", b.vocab_size, ")");
  ZT_CHECK(b.max_length() >= 1, where, ": max_position_embeddings ", b.max_position_embeddings,
           " leaves no position after RoBERTa's pad_token_id + 1 = ", b.pad_token_id + 1);
  ZT_CHECK(b.layer_norm_eps > 0, where, ": layer_norm_eps must be > 0");
  const std::pair<const char*, double> dropouts[] = {
      {"hidden_dropout_prob", b.hidden_dropout_prob},
      {"attention_probs_dropout_prob", b.attention_probs_dropout_prob}};
  for (const auto& [k, p] : dropouts)
    ZT_CHECK(p >= 0 && p < 1, where, ": ", k, " must be in [0, 1), got ", p);
  ZT_CHECK(b.classifier_dropout < 1, where, ": classifier_dropout must be < 1");

  // What the encoder does not compute: one line naming the key.
  std::string act = "gelu";
  get("hidden_act", act);
  ZT_CHECK(act == "gelu", where, ": hidden_act '", act,
           "' is not supported; the BERT example computes exact GELU (gelu)");
  std::string positions = "absolute";
  get("position_embedding_type", positions);
  ZT_CHECK(positions == "absolute", where, ": position_embedding_type '", positions,
           "' is not supported; the BERT example has absolute position embeddings");
  auto flag = [&](const char* k) {
    bool v = false;
    get(k, v);
    return v;
  };
  ZT_CHECK(!flag("is_decoder"), where, ": is_decoder is true; the BERT example is an encoder");
  ZT_CHECK(!flag("add_cross_attention"), where,
           ": add_cross_attention is true; the BERT example has no cross attention");
  std::string problem = "";
  get("problem_type", problem);
  ZT_CHECK(problem.empty() || problem == "regression" || problem == "single_label_classification",
           where, ": problem_type '", problem,
           "' is not supported; the BERT example trains regression or single_label_classification");
  ZT_CHECK(problem != "regression" || b.num_labels == 1, where,
           ": problem_type regression with num_labels ", b.num_labels, " (must be 1)");
  return b;
}

std::string bert_config_json(const BertConfig& b) {
  std::ostringstream j;
  j.precision(17);
  const char* arch =
      b.roberta() ? "RobertaForSequenceClassification" : "BertForSequenceClassification";
  j << "{\n"
    << "  \"architectures\": [\"" << arch << "\"],\n"
    << "  \"model_type\": \"" << b.model_type << "\",\n"
    << "  \"vocab_size\": " << b.vocab_size << ",\n"
    << "  \"hidden_size\": " << b.hidden_size << ",\n"
    << "  \"num_hidden_layers\": " << b.num_hidden_layers << ",\n"
    << "  \"num_attention_heads\": " << b.num_attention_heads << ",\n"
    << "  \"intermediate_size\": " << b.intermediate_size << ",\n"
    << "  \"hidden_act\": \"gelu\",\n"
    << "  \"hidden_dropout_prob\": " << b.hidden_dropout_prob << ",\n"
    << "  \"attention_probs_dropout_prob\": " << b.attention_probs_dropout_prob << ",\n"
    << "  \"classifier_dropout\": ";
  if (b.classifier_dropout >= 0) {
    j << b.classifier_dropout;
  } else {
    j << "null";
  }
  j << ",\n"
    << "  \"max_position_embeddings\": " << b.max_position_embeddings << ",\n"
    << "  \"type_vocab_size\": " << b.type_vocab_size << ",\n"
    << "  \"initializer_range\": " << b.initializer_range << ",\n"
    << "  \"layer_norm_eps\": " << b.layer_norm_eps << ",\n"
    << "  \"pad_token_id\": " << b.pad_token_id << ",\n"
    << "  \"position_embedding_type\": \"absolute\",\n"
    << "  \"is_decoder\": false,\n"
    << "  \"add_cross_attention\": false,\n"
    << "  \"problem_type\": \""
    << (b.num_labels == 1 ? "regression" : "single_label_classification") << "\",\n";
  // id2label/label2id carry num_labels (transformers' config derives it from them).
  j << "  \"id2label\": {";
  for (int64_t i = 0; i < b.num_labels; ++i)
    j << (i ? ", " : "") << "\"" << i << "\": \"LABEL_" << i << "\"";
  j << "},\n  \"label2id\": {";
  for (int64_t i = 0; i < b.num_labels; ++i) j << (i ? ", " : "") << "\"LABEL_" << i << "\": " << i;
  j << "},\n"
    << "  \"dtype\": \"float32\"\n"
    << "}\n";
  return j.str();
}

}  // namespace zt::models
