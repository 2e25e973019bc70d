#include "models/bert/hf_bert.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include <ATen/ATen.h>

#include "base/error.h"
#include "core/checkpoint/checkpoint.h"
#include "weights/safetensors_set.h"
#include "weights/safetensors_weights.h"
#include "weights/safetensors_writer.h"

namespace zt::models {
namespace {

std::string comma_separated(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

namespace fs = std::filesystem;

bool starts_with(const std::string& s, const std::string& p) {
  return s.rfind(p, 0) == 0;
}

bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

// What the files may hold that no parameter of ours takes: pre-training heads, the position and
// token-type id buffers older transformers versions saved, and the pooler a RobertaModel has but
// RobertaForSequenceClassification does not use.
bool not_ours(const std::string& tensor, const BertConfig& config) {
  return starts_with(tensor, "cls.") || starts_with(tensor, "lm_head.") ||
         ends_with(tensor, "embeddings.position_ids") ||
         ends_with(tensor, "embeddings.token_type_ids") ||
         (config.roberta() &&
          (starts_with(tensor, "pooler.") || starts_with(tensor, config.prefix() + ".pooler.")));
}

// The pretrained values for a model, with the head kept at its initialisation where the files have
// none (see hf_bert.h); the rest from `weights`.
class BertSource : public zero::ShardWeightSource {
 public:
  BertSource(SafetensorsWeights& weights, std::vector<std::string> fresh)
      : weights_(weights), fresh_(std::move(fresh)) {}
  void fill(const std::string& name, at::IntArrayRef shape, int64_t begin,
            const at::Tensor& dst) override {
    for (const auto& f : fresh_) {
      if (f == name) return;
    }
    weights_.fill(name, shape, begin, dst);
  }

 private:
  SafetensorsWeights& weights_;
  std::vector<std::string> fresh_;
};

}  // namespace

BertConfig read_hf_bert_config(const std::string& dir) {
  const fs::path config = fs::path(dir) / "config.json";
  ZT_CHECK(fs::is_regular_file(config), dir,
           " has no config.json (not a Hugging Face model directory)");
  return read_bert_config(config.string());
}

std::string load_hf_bert(const std::string& dir, BertForSequenceClassificationImpl& model,
                         zero::PartitionedInit* partitioned) {
  const SafetensorsSet files(dir);
  const std::string prefix = model.config().prefix() + ".";
  // Our name, or the bare name of a base model saved on its own.
  auto stored = [&files, prefix](const std::string& ours) {
    StoredTensor s{ours};
    if (files.find(ours) == nullptr && starts_with(ours, prefix) &&
        files.find(ours.substr(prefix.size())) != nullptr) {
      s.name = ours.substr(prefix.size());
    }
    return s;
  };
  std::vector<std::string> fresh;
  for (const auto& p : model.named_parameters()) {
    const bool head =
        starts_with(p.key(), "classifier.") || starts_with(p.key(), prefix + "pooler.");
    if (head && files.find(stored(p.key()).name) == nullptr) fresh.push_back(p.key());
  }
  SafetensorsWeights weights(files, stored);
  BertSource source(weights, fresh);
  if (partitioned) {
    partitioned->load(source);
  } else {
    torch::NoGradGuard no_grad;
    for (auto& p : model.named_parameters()) {
      at::Tensor flat = p.value().detach().view({-1});
      source.fill(p.key(), p.value().sizes(), 0, flat);
    }
  }
  weights.check_all_used(
      [&model](const std::string& tensor) { return not_ours(tensor, model.config()); });
  return detail::str("init from ", dir, " (Hugging Face ", model.config().model_type, "): loaded ",
                     weights.parameters_filled(), " parameters from ", files.files().size(),
                     " file(s)", partitioned ? " into this rank's shards" : "", "; new ",
                     fresh.size(), fresh.empty() ? "" : " (" + comma_separated(fresh) + ")");
}

void write_hf_bert(const std::string& out_dir, const BertConfig& config,
                   const BertTensors& values) {
  // The names and shapes of a model of this config, in its order.
  BertConfig c = config;
  c.activation_checkpointing = false;
  std::vector<SafetensorsWriter::Entry> entries;
  std::vector<at::Tensor> out;
  {
    BertForSequenceClassification model(c);
    for (const auto& p : model->named_parameters()) {
      auto it = values.find(p.key());
      ZT_CHECK(it != values.end(), "hf_bert: no value for parameter '", p.key(), "'");
      ZT_CHECK(it->second.sizes() == p.value().sizes(), "hf_bert: '", p.key(), "' is ",
               it->second.sizes(), ", a model of this config has ", p.value().sizes());
      entries.push_back({p.key(), at::kFloat, p.value().sizes().vec()});
      out.push_back(it->second.to(at::kFloat).contiguous());
    }
  }
  ZT_CHECK(values.size() == entries.size(), "hf_bert: ", values.size(),
           " values given, a model of this config has ", entries.size(), " parameters");
  fs::create_directories(out_dir);
  SafetensorsWriter w((fs::path(out_dir) / "model.safetensors").string(), entries);
  for (size_t i = 0; i < out.size(); ++i) w.write(entries[i].name, out[i]);
  w.commit();
  std::ofstream cfg(fs::path(out_dir) / "config.json");
  cfg << bert_config_json(config);
  ZT_CHECK(cfg.good(), "hf_bert: cannot write ", out_dir, "/config.json");
}

BertCheckpoint read_bert_checkpoint(const std::string& dir, const std::string& tag) {
  ZT_CHECK(fs::is_directory(dir), dir, " is not a directory");
  BertCheckpoint c;
  const fs::path config = fs::path(dir) / kCheckpointHfConfig;
  ZT_CHECK(fs::is_regular_file(config), dir, " has no ", kCheckpointHfConfig,
           " (not a checkpoint directory of train_bert)");
  c.config = read_bert_config(config.string());
  const std::string t = tag.empty() ? latest_checkpoint_tag(dir) : tag;
  c.source = dir + "/" + t;
  for_each_consolidated(dir, t, "master", [&](const std::string& name, const at::Tensor& v) {
    c.values[name] = v.to(at::kFloat);
  });
  return c;
}

}  // namespace zt::models
