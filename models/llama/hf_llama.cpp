#include "models/llama/hf_llama.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <yaml-cpp/yaml.h>

#include <ATen/ATen.h>

#include "base/error.h"
#include "core/checkpoint/checkpoint.h"
#include "models/llama/hf_experts.h"
#include "weights/safetensors_set.h"
#include "weights/safetensors_weights.h"
#include "weights/state_dict_file.h"

namespace zt::models {
namespace {

namespace fs = std::filesystem;

YAML::Node load_json(const std::string& path) {
  std::ifstream in(path);
  ZT_CHECK(in.good(), "cannot read ", path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return YAML::Load(text.str());  // JSON is YAML; yaml-cpp is the config's reader already
  } catch (const YAML::Exception& e) {
    ZT_THROW(path, ": not valid JSON: ", e.what());
  }
}

// Typed access to one JSON object, every error naming the file and key.
class JsonObject {
 public:
  JsonObject(YAML::Node node, std::string where) : n_(std::move(node)), where_(std::move(where)) {
    ZT_CHECK(n_.IsMap(), where_, ": not a JSON object");
  }
  bool has(const char* k) const { return n_[k] && !n_[k].IsNull(); }
  template <typename T>
  T get(const char* k, const T& fallback) const {
    if (!has(k)) return fallback;
    try {
      return n_[k].as<T>();
    } catch (const YAML::Exception&) {
      ZT_THROW(where_, ": ", k, " has the wrong type");
    }
  }
  template <typename T>
  T need(const char* k) const {
    ZT_CHECK(has(k), where_, ": missing ", k);
    return get<T>(k, T{});
  }
  YAML::Node node(const char* k) const { return n_[k]; }
  const std::string& where() const { return where_; }

 private:
  YAML::Node n_;
  std::string where_;
};

// rope_parameters (transformers 5) or rope_scaling + rope_theta (earlier), into `s`.
void read_rope(const JsonObject& c, LlamaShape& s) {
  const char* key = c.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  s.rope_theta = c.get<double>("rope_theta", 10000.0);
  if (!c.has(key)) return;
  const JsonObject r(c.node(key), c.where() + " " + key);
  for (const char* nested : {"full_attention", "sliding_attention"}) {
    ZT_CHECK(!r.has(nested), c.where(), ": ", key,
             " per layer type is not computed (one set of rotary parameters is)");
  }
  s.rope_scaling.type = r.get<std::string>("rope_type", r.get<std::string>("type", "default"));
  s.rope_theta = r.get<double>("rope_theta", s.rope_theta);
  ZT_CHECK(r.get<double>("partial_rotary_factor", 1.0) == 1.0, c.where(), ": ", key,
           ".partial_rotary_factor is not 1 (partial rotary embeddings are not computed)");
  const std::string& type = s.rope_scaling.type;
  ZT_CHECK(type == "default" || type == "linear" || type == "llama3", c.where(), ": ", key,
           ".rope_type '", type, "' is not computed (default, linear and llama3 are)");
  if (type == "default") return;
  s.rope_scaling.factor = r.need<double>("factor");
  if (type == "llama3") {
    s.rope_scaling.low_freq_factor = r.need<double>("low_freq_factor");
    s.rope_scaling.high_freq_factor = r.need<double>("high_freq_factor");
    s.rope_scaling.original_max_position_embeddings = r.get<int64_t>(
        "original_max_position_embeddings",
        c.get<int64_t>("original_max_position_embeddings", s.max_position_embeddings));
  }
}

// Per-layer windows: Mistral slides every layer; Qwen2 (and a Llama config carrying them) those
// layer_types marks sliding_attention, or, without layer_types, use_sliding_window's layers from
// max_window_layers on.
void read_windows(const JsonObject& c, LlamaShape& s) {
  const int64_t w = c.get<int64_t>("sliding_window", 0);
  s.layer_windows.clear();
  if (s.model_type == "mistral" || s.model_type == "mixtral" || s.model_type == "qwen3_moe") {
    if (w > 0) s.layer_windows.assign(s.num_hidden_layers, w);
    return;
  }
  if (c.has("layer_types")) {
    const YAML::Node types = c.node("layer_types");
    ZT_CHECK(types.IsSequence() && static_cast<int64_t>(types.size()) == s.num_hidden_layers,
             c.where(), ": layer_types must list one type per layer (", s.num_hidden_layers, ")");
    bool any = false;
    for (const auto& t : types) {
      const std::string type = t.as<std::string>();
      ZT_CHECK(type == "full_attention" || type == "sliding_attention", c.where(),
               ": layer_types entry '", type, "' is not full_attention or sliding_attention");
      any |= type == "sliding_attention";
    }
    if (!any) return;
    ZT_CHECK(w > 0, c.where(), ": layer_types has sliding_attention layers but no sliding_window");
    for (const auto& t : types)
      s.layer_windows.push_back(t.as<std::string>() == "full_attention" ? 0 : w);
    return;
  }
  if (c.get<bool>("use_sliding_window", false) && w > 0) {
    const int64_t first = c.get<int64_t>("max_window_layers", 0);
    for (int64_t i = 0; i < s.num_hidden_layers; ++i) s.layer_windows.push_back(i >= first ? w : 0);
  }
}

// The experts of mixtral, qwen2_moe and qwen3_moe (MoeShape), with transformers' defaults for
// absent keys; jitter noise (random scaling of the router's input in training) is not computed.
void read_experts(const JsonObject& c, LlamaShape& s) {
  MoeShape& m = s.moe;
  if (s.model_type == "mixtral") {
    m.num_experts = c.get<int64_t>("num_local_experts", 8);
    m.num_experts_per_tok = c.get<int64_t>("num_experts_per_tok", 2);
    m.intermediate_size = s.intermediate_size;
    m.norm_topk_prob = true;
    m.fp32_expert_weights = true;
    ZT_CHECK(c.get<double>("router_jitter_noise", 0.0) == 0.0, c.where(),
             ": router_jitter_noise is not computed (it must be 0)");
  } else if (s.model_type == "qwen2_moe" || s.model_type == "qwen3_moe") {
    const bool qwen2 = s.model_type == "qwen2_moe";
    // transformers 5 writes Qwen3-MoE's count as num_local_experts, earlier releases num_experts.
    m.num_experts =
        c.get<int64_t>("num_local_experts", c.get<int64_t>("num_experts", qwen2 ? 60 : 128));
    m.num_experts_per_tok = c.get<int64_t>("num_experts_per_tok", qwen2 ? 4 : 8);
    m.intermediate_size = c.get<int64_t>("moe_intermediate_size", qwen2 ? 1408 : 768);
    m.shared_expert_intermediate_size =
        qwen2 ? c.get<int64_t>("shared_expert_intermediate_size", 5632) : 0;
    m.norm_topk_prob = c.get<bool>("norm_topk_prob", false);
    m.decoder_sparse_step = c.get<int64_t>("decoder_sparse_step", 1);
    if (c.has("mlp_only_layers")) {
      const YAML::Node layers = c.node("mlp_only_layers");
      ZT_CHECK(layers.IsSequence(), c.where(), ": mlp_only_layers must be a list of layers");
      for (const auto& l : layers) m.mlp_only_layers.push_back(l.as<int64_t>());
    }
  } else {
    return;
  }
  m.output_router_logits = c.get<bool>("output_router_logits", false);
  m.router_aux_loss_coef = c.get<double>("router_aux_loss_coef", 0.001);
}

void write_experts(std::ostringstream& j, const LlamaShape& s) {
  if (!s.is_moe()) return;
  const MoeShape& m = s.moe;
  if (s.model_type == "mixtral") {
    ZT_CHECK(m.intermediate_size == s.intermediate_size && m.shared_expert_intermediate_size == 0 &&
                 m.norm_topk_prob && m.decoder_sparse_step == 1 && m.mlp_only_layers.empty(),
             "hf_llama: a Mixtral config has one intermediate_size, routes every layer and has "
             "no shared expert");
    j << "  \"num_local_experts\": " << m.num_experts << ",\n";
  } else {
    j << "  \"num_experts\": " << m.num_experts << ",\n"
      << "  \"moe_intermediate_size\": " << m.intermediate_size << ",\n"
      << "  \"norm_topk_prob\": " << (m.norm_topk_prob ? "true" : "false") << ",\n"
      << "  \"decoder_sparse_step\": " << m.decoder_sparse_step << ",\n"
      << "  \"mlp_only_layers\": [";
    for (size_t i = 0; i < m.mlp_only_layers.size(); ++i) {
      j << (i ? ", " : "") << m.mlp_only_layers[i];
    }
    j << "],\n";
    if (s.model_type == "qwen2_moe") {
      j << "  \"shared_expert_intermediate_size\": " << m.shared_expert_intermediate_size << ",\n";
    }
  }
  j << "  \"num_experts_per_tok\": " << m.num_experts_per_tok << ",\n"
    << "  \"output_router_logits\": " << (m.output_router_logits ? "true" : "false") << ",\n"
    << "  \"router_aux_loss_coef\": " << m.router_aux_loss_coef << ",\n";
}

bool ignorable_tensor(const std::string& name) {
  const std::string inv = "rotary_emb.inv_freq";  // older checkpoints saved the buffer
  return name.size() >= inv.size() && name.compare(name.size() - inv.size(), inv.size(), inv) == 0;
}

// A tied checkpoint may still store lm_head.weight: it must be the embedding.
void check_tied_head(const SafetensorsSet& files, const LlamaShape& s) {
  const SafetensorsReader* head = files.find("lm_head.weight");
  if (head == nullptr || !s.tie_word_embeddings) return;
  const SafetensorsReader* embed = files.find("model.embed_tokens.weight");
  ZT_CHECK(embed != nullptr, files.where(), ": no model.embed_tokens.weight");
  ZT_CHECK(head->map("lm_head.weight").equal(embed->map("model.embed_tokens.weight")), head->path(),
           ": lm_head.weight differs from model.embed_tokens.weight, but ",
           "tie_word_embeddings is true");
}

std::string source_of(const std::string& dir, const LlamaShape& s) {
  return dir + " (Hugging Face " + s.model_type + ")";
}

bool ignorable(const std::string& tensor, const LlamaShape& s) {
  return (tensor == "lm_head.weight" && s.tie_word_embeddings) || ignorable_tensor(tensor);
}

// A directory with only DIR/pytorch_model.bin (torch.save, as save_pretrained writes with
// safe_serialization=False): read whole, once, through LibTorch's unpickler.
class StateDictWeights : public zero::ShardWeightSource {
 public:
  StateDictWeights(std::string where, std::map<std::string, at::Tensor> values)
      : where_(std::move(where)), values_(std::move(values)) {}
  void fill(const std::string& name, at::IntArrayRef shape, int64_t begin,
            const at::Tensor& dst) override {
    const at::Tensor& v = find(name, shape);
    if (dst.numel() > 0) dst.copy_(v.reshape({-1}).narrow(0, begin, dst.numel()));
  }
  const at::Tensor& find(const std::string& name, at::IntArrayRef shape) {
    auto it = values_.find(name);
    ZT_CHECK(it != values_.end(), where_, ": no tensor ", name);
    ZT_CHECK(at::isFloatingType(it->second.scalar_type()), where_, ": tensor ", name, " is ",
             it->second.scalar_type(), ", not floating point");
    ZT_CHECK(it->second.sizes() == shape, where_, ": tensor ", name, " has shape ",
             it->second.sizes(), ", the model's is ", shape);
    used_.insert(name);
    return it->second;
  }
  void check_all_used(const LlamaShape& s) const {
    for (const auto& [name, v] : values_) {
      ZT_CHECK(used_.count(name) || ignorable(name, s), where_, ": tensor ", name,
               " is no parameter of the model");
    }
    auto head = values_.find("lm_head.weight");
    auto embed = values_.find("model.embed_tokens.weight");
    if (s.tie_word_embeddings && head != values_.end() && embed != values_.end()) {
      ZT_CHECK(head->second.equal(embed->second), where_,
               ": lm_head.weight differs from model.embed_tokens.weight, but "
               "tie_word_embeddings is true");
    }
  }
  size_t used() const { return used_.size(); }
  bool has(const std::string& name) const { return values_.count(name) > 0; }

 private:
  std::string where_;
  std::map<std::string, at::Tensor> values_;
  std::set<std::string> used_;
};

StateDictWeights read_bin(const std::string& dir) {
  const std::string bin = (fs::path(dir) / "pytorch_model.bin").string();
  return StateDictWeights(bin, read_state_dict_file(bin));
}

}  // namespace

LlamaShape llama_shape_from_hf_config(const std::string& path) {
  const JsonObject c(load_json(path), path);
  LlamaShape s;
  s.model_type = c.need<std::string>("model_type");
  ZT_CHECK(s.model_type == "llama" || s.model_type == "qwen2" || s.model_type == "mistral" ||
               s.model_type == "mixtral" || s.model_type == "qwen2_moe" ||
               s.model_type == "qwen3_moe",
           path, ": model_type '", s.model_type,
           "' is not llama, qwen2, mistral, mixtral, qwen2_moe or qwen3_moe");
  const std::string act = c.get<std::string>("hidden_act", "silu");
  ZT_CHECK(act == "silu", path, ": hidden_act '", act, "' is not silu");
  s.vocab_size = c.need<int64_t>("vocab_size");
  s.hidden_size = c.need<int64_t>("hidden_size");
  s.intermediate_size = c.need<int64_t>("intermediate_size");
  s.num_hidden_layers = c.need<int64_t>("num_hidden_layers");
  s.num_attention_heads = c.need<int64_t>("num_attention_heads");
  ZT_CHECK(s.num_attention_heads >= 1, path, ": num_attention_heads must be >= 1");
  s.num_key_value_heads = c.get<int64_t>("num_key_value_heads", s.num_attention_heads);
  s.head_dim = c.get<int64_t>("head_dim", s.hidden_size / s.num_attention_heads);
  s.max_position_embeddings = c.get<int64_t>("max_position_embeddings", 2048);
  s.rms_norm_eps = c.get<double>("rms_norm_eps", 1e-6);
  s.tie_word_embeddings = c.get<bool>("tie_word_embeddings", false);
  s.attention_dropout = c.get<double>("attention_dropout", 0.0);
  read_rope(c, s);
  if (s.model_type == "qwen2") {
    s.qkv_bias = true;
  } else if (s.model_type == "qwen2_moe") {
    s.qkv_bias = c.get<bool>("qkv_bias", true);
  } else if (s.model_type == "llama" || s.model_type == "qwen3_moe") {
    s.qkv_bias = s.o_bias = c.get<bool>("attention_bias", false);
    if (s.model_type == "llama") s.mlp_bias = c.get<bool>("mlp_bias", false);
  }
  s.qk_norm = s.model_type == "qwen3_moe";
  read_experts(c, s);
  read_windows(c, s);
  s.validate(path);
  return s;
}

std::string hf_llama_config_json(const LlamaShape& s) {
  std::ostringstream j;
  j.precision(17);
  const std::map<std::string, const char*> architectures = {
      {"llama", "LlamaForCausalLM"},        {"qwen2", "Qwen2ForCausalLM"},
      {"mistral", "MistralForCausalLM"},    {"mixtral", "MixtralForCausalLM"},
      {"qwen2_moe", "Qwen2MoeForCausalLM"}, {"qwen3_moe", "Qwen3MoeForCausalLM"}};
  ZT_CHECK(architectures.count(s.model_type), "hf_llama: no architecture for model_type ",
           s.model_type);
  const char* arch = architectures.at(s.model_type);
  j << "{\n  \"architectures\": [\"" << arch << "\"],\n"
    << "  \"model_type\": \"" << s.model_type << "\",\n"
    << "  \"vocab_size\": " << s.vocab_size << ",\n"
    << "  \"hidden_size\": " << s.hidden_size << ",\n"
    << "  \"intermediate_size\": " << s.intermediate_size << ",\n"
    << "  \"num_hidden_layers\": " << s.num_hidden_layers << ",\n"
    << "  \"num_attention_heads\": " << s.num_attention_heads << ",\n"
    << "  \"num_key_value_heads\": " << s.num_key_value_heads << ",\n"
    << "  \"head_dim\": " << s.head_dim << ",\n"
    << "  \"max_position_embeddings\": " << s.max_position_embeddings << ",\n"
    << "  \"rms_norm_eps\": " << s.rms_norm_eps << ",\n"
    << "  \"hidden_act\": \"silu\",\n"
    << "  \"initializer_range\": 0.02,\n"
    << "  \"attention_dropout\": " << s.attention_dropout << ",\n"
    << "  \"tie_word_embeddings\": " << (s.tie_word_embeddings ? "true" : "false")
    << ",\n"
    // The older form, which transformers 5 also reads (into rope_parameters).
    << "  \"rope_theta\": " << s.rope_theta << ",\n";
  const RopeScaling& r = s.rope_scaling;
  if (r.type == "default") {
    j << "  \"rope_scaling\": null,\n";
  } else {
    j << "  \"rope_scaling\": {\"rope_type\": \"" << r.type << "\", \"factor\": " << r.factor;
    if (r.type == "llama3") {
      j << ", \"low_freq_factor\": " << r.low_freq_factor
        << ", \"high_freq_factor\": " << r.high_freq_factor
        << ", \"original_max_position_embeddings\": " << r.original_max_position_embeddings;
    }
    j << "},\n";
  }
  if (s.model_type == "llama" || s.model_type == "qwen3_moe") {
    ZT_CHECK(s.qkv_bias == s.o_bias, "hf_llama: a ", s.model_type,
             " config has one attention_bias for q, k, v and o");
    j << "  \"attention_bias\": " << (s.o_bias ? "true" : "false") << ",\n";
    if (s.model_type == "llama")
      j << "  \"mlp_bias\": " << (s.mlp_bias ? "true" : "false") << ",\n";
  }
  if (s.model_type == "qwen2_moe")
    j << "  \"qkv_bias\": " << (s.qkv_bias ? "true" : "false") << ",\n";
  write_experts(j, s);
  bool sliding = false;
  for (int64_t i = 0; i < s.num_hidden_layers; ++i) sliding |= s.window(i) > 0;
  if (s.model_type == "mistral" || s.model_type == "mixtral" || s.model_type == "qwen3_moe") {
    for (int64_t i = 0; i < s.num_hidden_layers; ++i) {
      ZT_CHECK(s.window(i) == s.window(0), "hf_llama: ", s.model_type, " slides every layer alike");
    }
    if (sliding) {
      j << "  \"sliding_window\": " << s.window(0) << ",\n";
    } else {
      j << "  \"sliding_window\": null,\n";
    }
  } else if (sliding) {
    ZT_CHECK(s.model_type == "qwen2" || s.model_type == "qwen2_moe",
             "hf_llama: a Llama config has no sliding window");
    int64_t w = 0;
    j << "  \"use_sliding_window\": true,\n  \"layer_types\": [";
    for (int64_t i = 0; i < s.num_hidden_layers; ++i) {
      w = std::max(w, s.window(i));
      j << (i ? ", " : "") << (s.window(i) > 0 ? "\"sliding_attention\"" : "\"full_attention\"");
    }
    j << "],\n  \"sliding_window\": " << w << ",\n";
  }
  j << "  \"bos_token_id\": null,\n  \"eos_token_id\": null,\n  \"pad_token_id\": null,\n"
    << "  \"torch_dtype\": \"float32\"\n}\n";
  return j.str();
}

bool is_hf_directory(const std::string& dir) {
  return fs::is_regular_file(fs::path(dir) / "config.json") &&
         (SafetensorsSet::present(dir) || fs::is_regular_file(fs::path(dir) / "pytorch_model.bin"));
}

std::string load_hf_llama(const std::string& dir, LlamaForCausalLMImpl& model) {
  const LlamaShape pre = llama_shape_from_hf_config((fs::path(dir) / "config.json").string());
  const std::string source = source_of(dir, pre);
  check_same_llama(model.shape(), pre, source);
  torch::NoGradGuard no_grad;
  // Each parameter whole, through the same sources as a partitioned load (experts from either
  // layout: hf_experts.h).
  auto fill_all = [&](zero::ShardWeightSource& source) {
    for (auto& p : model.named_parameters()) {
      source.fill(p.key(), p.value().sizes(), 0, p.value().view({-1}));
    }
  };
  if (!SafetensorsSet::present(dir)) {
    StateDictWeights bin = read_bin(dir);
    PerExpertWeights weights(
        bin, [&](const std::string& n) { return bin.has(n); }, pre.model_type,
        (fs::path(dir) / "pytorch_model.bin").string());
    fill_all(weights);
    bin.check_all_used(pre);
    return detail::str("init from ", source, ": loaded ", bin.used(),
                       " tensors from pytorch_model.bin");
  }
  const SafetensorsSet files(dir);
  check_tied_head(files, pre);
  SafetensorsWeights weights(files, [](const std::string& p) { return StoredTensor{p}; });
  PerExpertWeights layouts(
      weights, [&](const std::string& n) { return files.find(n) != nullptr; }, pre.model_type,
      files.where());
  fill_all(layouts);
  weights.check_all_used([&](const std::string& t) { return ignorable(t, pre); });
  return detail::str("init from ", source, ": loaded ", weights.parameters_filled(),
                     " tensors from ", files.files().size(), " file(s)");
}

std::string load_hf_llama_shards(const std::string& dir, const LlamaShape& model,
                                 zero::PartitionedInit& parts) {
  const LlamaShape pre = llama_shape_from_hf_config((fs::path(dir) / "config.json").string());
  const std::string source = source_of(dir, pre);
  check_same_llama(model, pre, source);
  if (!SafetensorsSet::present(dir)) {
    // No mapping to read ranges from: the file is read whole once, then each rank keeps its
    // shards' ranges of it (peak: the whole model once, as torch.load; safetensors avoid that).
    StateDictWeights bin = read_bin(dir);
    PerExpertWeights weights(
        bin, [&](const std::string& n) { return bin.has(n); }, pre.model_type,
        (fs::path(dir) / "pytorch_model.bin").string());
    parts.load(weights);
    bin.check_all_used(pre);
    return detail::str("init from ", source, ": loaded ", bin.used(),
                       " parameters into this rank's shards from pytorch_model.bin (read whole)");
  }
  const SafetensorsSet files(dir);
  check_tied_head(files, pre);
  SafetensorsWeights weights(files, [](const std::string& p) { return StoredTensor{p}; });
  PerExpertWeights layouts(
      weights, [&](const std::string& n) { return files.find(n) != nullptr; }, pre.model_type,
      files.where());
  parts.load(layouts);
  weights.check_all_used([&](const std::string& t) { return ignorable(t, pre); });
  return detail::str("init from ", source, ": loaded ", weights.parameters_filled(),
                     " parameters into this rank's shards from ", files.files().size(),
                     " file(s), reading only their ranges");
}

void check_same_llama(const LlamaShape& m, const LlamaShape& p, const std::string& source) {
  auto differ = [&](const char* key, const auto& ours, const auto& theirs) {
    ZT_CHECK(ours == theirs, source, " has ", key, " ", theirs, ", the model's config has ", ours);
  };
  differ("model_type", m.model_type, p.model_type);
  differ("vocab_size", m.vocab_size, p.vocab_size);
  differ("hidden_size", m.hidden_size, p.hidden_size);
  differ("num_hidden_layers", m.num_hidden_layers, p.num_hidden_layers);
  differ("num_attention_heads", m.num_attention_heads, p.num_attention_heads);
  differ("num_key_value_heads", m.num_key_value_heads, p.num_key_value_heads);
  differ("head_dim", m.head_dim, p.head_dim);
  differ("rope_theta", m.rope_theta, p.rope_theta);
  differ("rope type", m.rope_scaling.type, p.rope_scaling.type);
  differ("rope factor", m.rope_scaling.factor, p.rope_scaling.factor);
  differ("rms_norm_eps", m.rms_norm_eps, p.rms_norm_eps);
  differ("tie_word_embeddings", m.tie_word_embeddings, p.tie_word_embeddings);
  ZT_CHECK(m.layer_windows == p.layer_windows, source,
           " has other sliding windows than the model's config");
  differ("q/k norms", m.qk_norm, p.qk_norm);
  ZT_CHECK(same_experts(m.moe, p.moe), source, " has other experts than the model's config (",
           p.moe.num_experts, " x ", p.moe.intermediate_size, " against ", m.moe.num_experts, " x ",
           m.moe.intermediate_size, ")");
}

std::string export_hf_llama(const std::string& checkpoint_dir, const std::string& tag,
                            const std::string& out_dir, bool per_expert) {
  const fs::path cfg = fs::path(checkpoint_dir) / "config.json";
  ZT_CHECK(fs::is_regular_file(cfg), checkpoint_dir, " has no config.json (train_llama writes ",
           "the model's Hugging Face config there when it saves checkpoints)");
  const LlamaShape s = llama_shape_from_hf_config(cfg.string());
  const std::string t = tag.empty() ? latest_checkpoint_tag(checkpoint_dir) : tag;
  fs::create_directories(out_dir);
  // Our names are transformers' names: the consolidated masters are the weights file as they are,
  // a mixture's experts split per expert unless asked fused.
  StoredLayout layout;
  if (per_expert && s.is_moe()) {
    layout = [&](const std::string& name, const std::vector<int64_t>& shape) {
      return per_expert_pieces(s.model_type, name, shape);
    };
  }
  consolidate_to_safetensors(checkpoint_dir, t, (fs::path(out_dir) / "model.safetensors").string(),
                             layout);
  std::ofstream out(fs::path(out_dir) / "config.json");
  out << hf_llama_config_json(s);
  ZT_CHECK(out.good(), "cannot write ", out_dir, "/config.json");
  return detail::str("wrote ", out_dir, "/config.json and model.safetensors from ", checkpoint_dir,
                     "/", t, " (", s.model_type, ", ", s.num_hidden_layers, " layers, hidden ",
                     s.hidden_size, ", vocab ", s.vocab_size, ")");
}

}  // namespace zt::models
