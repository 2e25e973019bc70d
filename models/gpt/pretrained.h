#pragma once
// Pretrained weights for the GPT trunk, by our parameter names (gpt_model.h), from either
//   - a Hugging Face GPT-2 directory (config.json + model.safetensors or a sharded index,
//     hf_gpt2.h), or
//   - a zerotorch checkpoint directory of the GPT example (core/checkpoint/checkpoint.h), saved
//     at any stage and world size: the values are consolidated from every shard by parameter
//     name, as resume does when it reshards, and the shape comes from the stored config's
//     `model` block.
// read_pretrained_gpt holds the whole model in memory (fp32), for a model built whole:
//
//   PretrainedGpt p = read_pretrained_gpt("out/checkpoints");
//   check_same_architecture(model->shape(), p);
//   LoadReport r = load_by_name(*model, p.values, {});   // train/load_by_name.h
//
// A model built partitioned (ZeRO stage 3, core/zero/partitioned_init.h) takes a Hugging Face
// directory straight into its shards: each rank maps the files and copies only its shards' ranges
// (SafetensorsWeights), so no rank holds more than its shards. A zerotorch checkpoint directory
// is not streamed (its values are consolidated across the saving run's shards): train_gpt builds
// the model whole for it, and says so.
//
//   if (streams_into_shards(dir)) {
//     Gpt model(shape, parts);                      // partitioned
//     ZT_LOG_INFO(load_pretrained_shards(dir, model->shape(), *parts));
//   }

#include <string>

#include "core/zero/partitioned_init.h"
#include "models/gpt/gpt_block.h"
#include "models/gpt/hf_gpt2.h"

namespace zt::models {

struct PretrainedGpt {
  GptShape shape;
  NamedTensors values;  // fp32 (a checkpoint's masters) or the file's dtype (Hugging Face)
  std::string source;   // for messages: "<dir> (Hugging Face GPT-2)" or "<dir>/<tag>"
};

// `tag`: a checkpoint tag ("" = the `latest` one; ignored for Hugging Face directories).
// `weights`: "master", or "swa" for the stochastic weight average a checkpoint holds
// (optim/swa.h; an error naming the checkpoint when it holds none).
PretrainedGpt read_pretrained_gpt(const std::string& path, const std::string& tag = "",
                                  const std::string& weights = "master");

// Whether `path` is a Hugging Face GPT-2 directory (config.json), which load_pretrained_shards
// takes; a checkpoint directory is read whole (read_pretrained_gpt).
bool streams_into_shards(const std::string& path);

// The Hugging Face GPT-2 directory `dir` (one model.safetensors, or shards with their index) into
// the shards of a model of shape `model` built partitioned with `parts`, before the engine adopts
// them; every rank calls it. The values are bit for bit those read_pretrained_gpt +
// load_by_name give the whole model (the same dtype conversion), under the same rules: every
// parameter found with its shape, every file tensor a parameter's (or the tied lm_head.weight,
// equal to wte, or GPT-2's attention-mask buffers). Errors are one line naming file and tensor.
// Returns the line to log.
std::string load_pretrained_shards(const std::string& dir, const GptShape& model,
                                   zero::PartitionedInit& parts);

// What parameter shapes cannot show: heads and activation. Throws one line naming `source`.
void check_same_architecture(const GptShape& model, const PretrainedGpt& pretrained);

}  // namespace zt::models
