#include "models/gpt/hf_gpt2.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <vector>
#include <yaml-cpp/yaml.h>

#include <ATen/ATen.h>

#include "base/error.h"
#include "weights/safetensors_set.h"
#include "weights/safetensors_writer.h"

namespace zt::models {
namespace {

namespace fs = std::filesystem;

// Block-local names: ours -> GPT-2's, and whether the weight is a Conv1D (stored [in, out]).
struct BlockName {
  const char* ours;
  const char* hf;
  bool transposed;
};
constexpr BlockName kBlockNames[] = {
    {"ln1.weight", "ln_1.weight", false},
    {"ln1.bias", "ln_1.bias", false},
    {"attn.qkv.weight", "attn.c_attn.weight", true},
    {"attn.qkv.bias", "attn.c_attn.bias", false},
    {"attn.proj.weight", "attn.c_proj.weight", true},
    {"attn.proj.bias", "attn.c_proj.bias", false},
    {"ln2.weight", "ln_2.weight", false},
    {"ln2.bias", "ln_2.bias", false},
    {"fc.weight", "mlp.c_fc.weight", true},
    {"fc.bias", "mlp.c_fc.bias", false},
    {"out.weight", "mlp.c_proj.weight", true},
    {"out.bias", "mlp.c_proj.bias", false},
};
constexpr const char* kTopNames[] = {"wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  ZT_CHECK(in.good(), "cannot read ", path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

YAML::Node load_json(const std::string& path) {
  try {
    return YAML::Load(read_text(path));
  } catch (const YAML::Exception& e) {
    ZT_THROW(path, ": not valid JSON: ", e.what());
  }
}

}  // namespace

std::string hf_gpt2_name(const std::string& name, bool* transposed) {
  *transposed = false;
  for (const char* top : kTopNames) {
    if (name == top) return std::string("transformer.") + top;
  }
  static const std::regex block(R"(blocks\.(\d+)\.(.+))");
  std::smatch m;
  if (std::regex_match(name, m, block)) {
    for (const BlockName& b : kBlockNames) {
      if (m[2] == b.ours) {
        *transposed = b.transposed;
        return "transformer.h." + m[1].str() + "." + b.hf;
      }
    }
  }
  ZT_THROW("hf_gpt2: parameter '", name, "' has no GPT-2 counterpart");
}

std::string gpt_name_from_hf(const std::string& hf_name, bool* transposed) {
  *transposed = false;
  const std::string prefix = "transformer.";
  const std::string n = hf_name.rfind(prefix, 0) == 0 ? hf_name.substr(prefix.size()) : hf_name;
  if (n == "lm_head.weight") return "";
  for (const char* top : kTopNames) {
    if (n == top) return top;
  }
  static const std::regex block(R"(h\.(\d+)\.(.+))");
  std::smatch m;
  if (std::regex_match(n, m, block)) {
    if (m[2] == "attn.bias" || m[2] == "attn.masked_bias") return "";  // causal-mask buffers
    for (const BlockName& b : kBlockNames) {
      if (m[2] == b.hf) {
        *transposed = b.transposed;
        return "blocks." + m[1].str() + "." + b.ours;
      }
    }
  }
  ZT_THROW("hf_gpt2: tensor '", hf_name, "' is not a GPT-2 weight the GPT example has");
}

std::string hf_gpt2_config_json(const GptShape& s) {
  std::ostringstream j;
  j.precision(17);
  // What transformers' GPT2Config reads (transformers/models/gpt2/configuration_gpt2.py); n_inner
  // null = 4 n_embd; no bos/eos ids, since GPT-2's 50256 lies outside a smaller vocabulary.
  j << "{\n"
    << "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
    << "  \"model_type\": \"gpt2\",\n"
    << "  \"vocab_size\": " << s.vocab_size << ",\n"
    << "  \"n_positions\": " << s.max_seq_len << ",\n"
    << "  \"n_embd\": " << s.d_model << ",\n"
    << "  \"n_layer\": " << s.n_layer << ",\n"
    << "  \"n_head\": " << s.n_head << ",\n"
    << "  \"n_inner\": null,\n"
    << "  \"activation_function\": \"" << s.activation << "\",\n"
    << "  \"resid_pdrop\": " << s.dropout << ",\n"
    << "  \"embd_pdrop\": " << s.dropout << ",\n"
    << "  \"attn_pdrop\": " << s.dropout << ",\n"
    << "  \"layer_norm_epsilon\": 1e-05,\n"
    << "  \"initializer_range\": 0.02,\n"
    << "  \"scale_attn_weights\": true,\n"
    << "  \"scale_attn_by_inverse_layer_idx\": false,\n"
    << "  \"reorder_and_upcast_attn\": false,\n"
    << "  \"tie_word_embeddings\": true,\n"
    << "  \"bos_token_id\": null,\n"
    << "  \"eos_token_id\": null,\n"
    << "  \"torch_dtype\": \"float32\"\n"
    << "}\n";
  return j.str();
}

GptShape gpt_shape_from_hf_config(const std::string& path) {
  const YAML::Node c = load_json(path);
  ZT_CHECK(c.IsMap(), path, ": not a JSON object");
  auto has = [&](const char* k) { return c[k] && !c[k].IsNull(); };
  auto need = [&](const char* k) {
    ZT_CHECK(has(k), path, ": missing ", k);
    return c[k].as<int64_t>();
  };
  if (has("model_type")) {
    ZT_CHECK(c["model_type"].as<std::string>() == "gpt2", path, ": model_type is '",
             c["model_type"].as<std::string>(), "', the GPT example reads gpt2");
  }
  GptShape s;
  s.vocab_size = need("vocab_size");
  s.max_seq_len = need("n_positions");
  s.d_model = need("n_embd");
  s.n_layer = need("n_layer");
  s.n_head = need("n_head");
  if (has("n_inner")) {
    ZT_CHECK(c["n_inner"].as<int64_t>() == 4 * s.d_model, path, ": n_inner ",
             c["n_inner"].as<int64_t>(), " is not 4 n_embd (", 4 * s.d_model,
             "), the GPT example's MLP width");
  }
  const std::string act =
      has("activation_function") ? c["activation_function"].as<std::string>() : "gelu_new";
  // gelu_pytorch_tanh is the same tanh approximation, computed by torch's kernel.
  ZT_CHECK(act == "gelu" || act == "gelu_new" || act == "gelu_pytorch_tanh", path,
           ": activation_function '", act, "' is not gelu or gelu_new");
  s.activation = act == "gelu" ? "gelu" : "gelu_new";
  if (has("layer_norm_epsilon")) {
    const double eps = c["layer_norm_epsilon"].as<double>();
    ZT_CHECK(std::abs(eps - 1e-5) < 1e-12, path, ": layer_norm_epsilon ", eps,
             " is not 1e-5, the GPT example's LayerNorm eps");
  }
  auto flag = [&](const char* k, bool dflt) { return has(k) ? c[k].as<bool>() : dflt; };
  ZT_CHECK(flag("tie_word_embeddings", true), path,
           ": tie_word_embeddings is false; the GPT example's head is tied to wte");
  ZT_CHECK(flag("scale_attn_weights", true), path,
           ": scale_attn_weights is false; the GPT example scales attention by 1/sqrt(head dim)");
  ZT_CHECK(!flag("scale_attn_by_inverse_layer_idx", false), path,
           ": scale_attn_by_inverse_layer_idx is true; the GPT example has no such scaling");
  ZT_CHECK(!flag("add_cross_attention", false), path,
           ": add_cross_attention is true; the GPT example is a decoder only");
  s.dropout = has("resid_pdrop") ? c["resid_pdrop"].as<double>() : 0.1;
  return s;
}

void write_hf_gpt2(const std::string& out_dir, const GptShape& shape, const NamedTensors& values) {
  fs::create_directories(out_dir);
  // Every parameter of the shape, in model order (a model of this shape names them).
  std::vector<std::string> names = {"wte.weight", "wpe.weight"};
  for (int64_t i = 0; i < shape.n_layer; ++i) {
    for (const BlockName& b : kBlockNames)
      names.push_back("blocks." + std::to_string(i) + "." + b.ours);
  }
  names.push_back("ln_f.weight");
  names.push_back("ln_f.bias");
  ZT_CHECK(values.size() == names.size(), "hf_gpt2: ", values.size(),
           " parameters given, a GPT of this shape has ", names.size());
  std::vector<SafetensorsWriter::Entry> entries;
  std::vector<at::Tensor> out;
  for (const std::string& n : names) {
    auto it = values.find(n);
    ZT_CHECK(it != values.end(), "hf_gpt2: no value for parameter '", n, "'");
    bool transposed = false;
    const std::string hf = hf_gpt2_name(n, &transposed);
    at::Tensor v = transposed ? it->second.t().contiguous() : it->second.contiguous();
    entries.push_back({hf, v.scalar_type(), v.sizes().vec()});
    out.push_back(v);
  }
  ZT_CHECK(out[0].size(0) == shape.vocab_size && out[0].size(1) == shape.d_model &&
               out[1].size(0) == shape.max_seq_len,
           "hf_gpt2: wte/wpe shapes do not match the model shape");
  SafetensorsWriter w((fs::path(out_dir) / "model.safetensors").string(), entries);
  for (size_t i = 0; i < out.size(); ++i) w.write(entries[i].name, out[i]);
  w.commit();
  std::ofstream cfg(fs::path(out_dir) / "config.json");
  cfg << hf_gpt2_config_json(shape);
  ZT_CHECK(cfg.good(), "hf_gpt2: cannot write ", out_dir, "/config.json");
}

HfGpt2 read_hf_gpt2(const std::string& dir) {
  const fs::path d(dir);
  ZT_CHECK(fs::is_regular_file(d / "config.json"), dir, " has no config.json (not a Hugging Face ",
           "model directory)");
  HfGpt2 r;
  r.shape = gpt_shape_from_hf_config((d / "config.json").string());
  const SafetensorsSet files(dir);  // one file, or the index's shards: each tensor in one file
  at::Tensor lm_head;
  for (const auto& reader : files.files()) {
    for (const auto& e : reader->entries()) {
      bool transposed = false;
      const std::string ours = gpt_name_from_hf(e.name, &transposed);
      if (ours.empty()) {
        if (e.name == "lm_head.weight") lm_head = reader->read(e.name);
        continue;
      }
      ZT_CHECK(at::isFloatingType(e.dtype), reader->path(), ": tensor '", e.name, "' is ", e.dtype,
               "; GPT-2 weights are floating point (F32, BF16, F16, F64)");
      ZT_CHECK(!r.values.count(ours), reader->path(), ": tensor '", e.name, "' gives parameter ",
               ours, " a second time");
      at::Tensor v = reader->read(e.name);
      r.values[ours] = transposed ? v.t().contiguous() : v;
    }
  }
  ZT_CHECK(r.values.count("wte.weight"), dir, ": no transformer.wte.weight");
  if (lm_head.defined()) {
    ZT_CHECK(lm_head.equal(r.values["wte.weight"]), dir,
             ": lm_head.weight differs from wte; the GPT example's head is tied");
  }
  return r;
}

}  // namespace zt::models
