#pragma once
// The BERT example and Hugging Face model directories, both ways. Our parameter names are the
// file's (bert_model.h), so the mapping is the identity, with two allowances transformers'
// from_pretrained also makes when it loads a *ForSequenceClassification:
//   - a file without the task head (a pre-trained BertModel / BertForMaskedLM / RobertaForMaskedLM
//     directory): the head ("classifier.*", and BERT's "<prefix>.pooler.*" when the file has none)
//     keeps its initialisation, and the pre-training heads the file holds ("cls.*", "lm_head.*")
//     are not loaded, nor a RobertaModel's pooler (RoBERTa's head has its own dense layer);
//   - a base model saved on its own names its tensors without the "bert." / "roberta." prefix.
// Any other missing tensor, a tensor of another shape, or a tensor no parameter takes is one
// zt::Error naming the file (or the index) and the tensor.
//
// A model built partitioned (ZeRO stage 3) is loaded straight from the mapped files into each
// rank's shards (weights/safetensors_weights.h), so no rank holds more than its shards; a whole
// model through the same reader.
//
// Out: config.json (bert_config_json) and one model.safetensors, fp32, in the model's order.
// A zerotorch checkpoint of the example keeps its Hugging Face config next to its tags
// (kCheckpointHfConfig), so it exports with no other input.

#include <map>
#include <string>

#include <ATen/core/Tensor.h>

#include "core/zero/partitioned_init.h"
#include "models/bert/bert_config.h"
#include "models/bert/bert_model.h"

namespace zt::models {

using BertTensors = std::map<std::string, at::Tensor>;

// The config.json of a checkpoint directory (written by train_bert at its start, read by
// zt-export-hf and read_bert_checkpoint).
inline constexpr const char* kCheckpointHfConfig = "hf_config.json";

// DIR/config.json as a BertConfig.
BertConfig read_hf_bert_config(const std::string& dir);

// DIR's safetensors (model.safetensors or a sharded index) into `model`, built for DIR's config:
// into this rank's shards when `partitioned` (every rank calls it, after construction, before the
// engine), else into the whole model. Returns the line to log (what was loaded, what is new).
std::string load_hf_bert(const std::string& dir, BertForSequenceClassificationImpl& model,
                         zero::PartitionedInit* partitioned);

// OUT_DIR/config.json and OUT_DIR/model.safetensors (fp32). `values` must be exactly the
// parameters of a model of `config`, by name, with their shapes.
void write_hf_bert(const std::string& out_dir, const BertConfig& config, const BertTensors& values);

struct BertCheckpoint {
  BertConfig config;
  BertTensors values;  // fp32, consolidated from every shard
  std::string source;  // "<dir>/<tag>"
};
// A checkpoint of train_bert (any stage and world size): the master weights of `tag` ("" = the
// latest) and the config kept with them.
BertCheckpoint read_bert_checkpoint(const std::string& dir, const std::string& tag = "");

}  // namespace zt::models
