#include "examples/gpt/pretrained.h"

#include <filesystem>

#include <ATen/ATen.h>

#include "core/base/error.h"
#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/format.h"
#include "core/config/config.h"
#include "examples/gpt/gpt_config.h"

namespace zt::examples {
namespace {

namespace fs = std::filesystem;

PretrainedGpt read_checkpoint(const std::string& dir, std::string tag, const std::string& weights) {
  ZT_CHECK(fs::is_directory(dir), "pretrained weights: ", dir, " is not a directory");
  if (tag.empty()) tag = latest_checkpoint_tag(dir);
  PretrainedGpt p;
  p.source = dir + "/" + tag;
  const ckpt::Metadata meta =
      ckpt::read_metadata((fs::path(dir) / tag / ckpt::kMetadataFile).string());
  ZT_CHECK(!meta.config_json.empty(), p.source, " stores no config (the GPT's shape is unknown)");
  // Masters first: they also give the frozen parameters, which no optimizer state covers.
  for_each_consolidated(dir, tag, "master", [&](const std::string& name, const at::Tensor& t) {
    p.values[name] = t.to(at::kFloat);
  });
  if (weights == "swa") {
    bool any = false;
    try {
      for_each_consolidated(dir, tag, "swa_model",
                            [&](const std::string& name, const at::Tensor& t) {
                              p.values[name] = t;
                              any = true;
                            });
    } catch (const Error& e) {
      ZT_THROW(p.source, " holds no SWA average (was swa.enabled set in its run?): ", e.what());
    }
    ZT_CHECK(any, p.source, " holds no SWA average");
  } else {
    ZT_CHECK(weights == "master", "pretrained weights: `weights` must be master or swa, got '",
             weights, "'");
  }
  ZT_CHECK(p.values.count("wte.weight"), p.source,
           " is not a checkpoint of the GPT example (no wte.weight)");
  const Config config = parse_config(meta.config_json, ConfigFormat::kJson, {}, meta.world_size);
  p.shape = gpt_shape_from_config(config.program_block("model"), p.values["wte.weight"].size(0));
  return p;
}

}  // namespace

PretrainedGpt read_pretrained_gpt(const std::string& path, const std::string& tag,
                                  const std::string& weights) {
  if (fs::is_regular_file(fs::path(path) / "config.json")) {
    ZT_CHECK(weights == "master", path, " is a Hugging Face directory: it has no '", weights,
             "' weights");
    HfGpt2 hf = read_hf_gpt2(path);
    return {hf.shape, std::move(hf.values), path + " (Hugging Face GPT-2)"};
  }
  return read_checkpoint(path, tag, weights);
}

void check_same_architecture(const GptShape& model, const PretrainedGpt& p) {
  ZT_CHECK(model.n_head == p.shape.n_head, p.source, " has n_head ", p.shape.n_head,
           ", the model's config has ", model.n_head, " (set model.n_head)");
  ZT_CHECK(model.activation == p.shape.activation, p.source, " was trained with activation ",
           p.shape.activation, ", the model's config has ", model.activation,
           " (set model.activation)");
}

}  // namespace zt::examples
