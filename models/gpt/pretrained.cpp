#include "models/gpt/pretrained.h"

#include <filesystem>

#include <ATen/ATen.h>

#include "base/error.h"
#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/format.h"
#include "core/config/config.h"
#include "models/gpt/gpt_config.h"
#include "weights/safetensors_weights.h"

namespace zt::models {
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

bool streams_into_shards(const std::string& path) {
  return fs::is_regular_file(fs::path(path) / "config.json");
}

std::string load_pretrained_shards(const std::string& dir, const GptShape& model,
                                   zero::PartitionedInit& parts) {
  ZT_CHECK(streams_into_shards(dir), dir, " has no config.json (not a Hugging Face model ",
           "directory); only those load into a model built partitioned");
  const std::string source = dir + " (Hugging Face GPT-2)";
  check_same_architecture(
      model, {gpt_shape_from_hf_config((fs::path(dir) / "config.json").string()), {}, source});
  const SafetensorsSet files(dir);
  // GPT-2's names, with or without the "transformer." prefix (the original GPT-2 files have
  // none), as read_hf_gpt2 accepts them.
  SafetensorsWeights weights(files, [&files](const std::string& ours) {
    StoredTensor s;
    s.name = hf_gpt2_name(ours, &s.transposed);
    const std::string bare = s.name.substr(std::string("transformer.").size());
    if (files.find(s.name) == nullptr && files.find(bare) != nullptr) s.name = bare;
    return s;
  });
  parts.load(weights);
  // What carries no weight of ours (the tied head, attention-mask buffers) may be left over.
  weights.check_all_used([](const std::string& tensor) {
    try {
      bool transposed = false;
      return gpt_name_from_hf(tensor, &transposed).empty();
    } catch (const Error&) {
      return false;  // not a GPT-2 weight: reported by check_all_used, naming the file
    }
  });
  // The tied head, compared in the files (mapped: page cache, no copy) as read_hf_gpt2 does.
  if (const SafetensorsReader* head = files.find("lm_head.weight")) {
    const std::string wte =
        files.find("transformer.wte.weight") != nullptr ? "transformer.wte.weight" : "wte.weight";
    ZT_CHECK(head->map("lm_head.weight").equal(files.find(wte)->map(wte)), head->path(),
             ": lm_head.weight differs from ", wte, "; the GPT example's head is tied");
  }
  return detail::str("init from ", source, ": loaded ", weights.parameters_filled(),
                     " parameters into this rank's shards from ", files.files().size(),
                     " file(s), reading only their ranges");
}

void check_same_architecture(const GptShape& model, const PretrainedGpt& p) {
  ZT_CHECK(model.n_head == p.shape.n_head, p.source, " has n_head ", p.shape.n_head,
           ", the model's config has ", model.n_head, " (set model.n_head)");
  ZT_CHECK(model.activation == p.shape.activation, p.source, " was trained with activation ",
           p.shape.activation, ", the model's config has ", model.activation,
           " (set model.activation)");
}

}  // namespace zt::models
