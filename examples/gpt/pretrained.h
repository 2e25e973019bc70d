#pragma once
// Pretrained weights for the GPT trunk, by our parameter names (gpt_model.h), from either
//   - a Hugging Face GPT-2 directory (config.json + model.safetensors or a sharded index,
//     hf_gpt2.h), or
//   - a zerotorch checkpoint directory of the GPT example (core/checkpoint/checkpoint.h), saved
//     at any stage and world size: the values are consolidated from every shard by parameter
//     name, as resume does when it reshards, and the shape comes from the stored config's
//     `model` block.
// The whole model is held in memory (fp32); the beyond-memory work will stream it instead.
//
//   PretrainedGpt p = read_pretrained_gpt("out/checkpoints");
//   check_same_architecture(model->shape(), p);
//   LoadReport r = load_by_name(*model, p.values, {});   // examples/common/load_by_name.h

#include <string>

#include "examples/gpt/gpt_block.h"
#include "examples/gpt/hf_gpt2.h"

namespace zt::examples {

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

// What parameter shapes cannot show: heads and activation. Throws one line naming `source`.
void check_same_architecture(const GptShape& model, const PretrainedGpt& pretrained);

}  // namespace zt::examples
