// zt-export-hf CKPT_DIR OUT_DIR [--family gpt|llama|bert] [--tag T] [--weights master|swa]
//              [--experts per-expert|fused]: a
// checkpoint of train_gpt, train_llama or train_bert (any stage, any world size) as a Hugging Face
// directory: OUT_DIR/config.json and OUT_DIR/model.safetensors (the fp32 master weights under
// transformers' names), loadable with from_pretrained(OUT_DIR):
//   gpt    GPT2LMHeadModel, GPT-2's names and Conv1D layout (models/gpt/hf_gpt2.h); with
//          --weights swa the stochastic weight average the run kept (optim/swa.h);
//   llama  AutoModelForCausalLM (Llama, Qwen2, Mistral, Mixtral, Qwen2-MoE, Qwen3-MoE), from the
//          config.json train_llama keeps in CKPT_DIR (models/llama/hf_llama.h); a mixture's
//          experts one tensor per expert, as save_pretrained writes them, or with --experts fused
//          as transformers 5 holds them in memory (models/llama/hf_experts.h);
//   bert   AutoModelForSequenceClassification (BERT, RoBERTa), from the hf_config.json train_bert
//          keeps in CKPT_DIR (models/bert/hf_bert.h).
// Without --family the family is the one whose file CKPT_DIR holds (config.json: llama,
// hf_config.json: bert, neither: gpt, whose shape is in the checkpoint's own metadata).

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/main_guard.h"
#include "models/bert/hf_bert.h"
#include "models/gpt/hf_gpt2.h"
#include "models/gpt/pretrained.h"
#include "models/llama/hf_llama.h"

namespace {

namespace fs = std::filesystem;

std::string detect_family(const std::string& ckpt_dir) {
  ZT_CHECK(fs::is_directory(ckpt_dir), ckpt_dir, " is not a checkpoint directory");
  const bool llama = fs::is_regular_file(fs::path(ckpt_dir) / "config.json");
  const bool bert = fs::is_regular_file(fs::path(ckpt_dir) / zt::models::kCheckpointHfConfig);
  ZT_CHECK(!(llama && bert), ckpt_dir, " holds both config.json (train_llama's) and ",
           zt::models::kCheckpointHfConfig, " (train_bert's); name one with --family");
  return llama ? "llama" : bert ? "bert" : "gpt";
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_main("zt-export-hf", [&] {
    const char* usage =
        "usage: zt-export-hf CKPT_DIR OUT_DIR [--family gpt|llama|bert] [--tag T] "
        "[--weights master|swa] [--experts per-expert|fused]";
    std::vector<std::string> pos;
    std::string tag, weights = "master", family, experts;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--tag" || a == "--weights" || a == "--family" || a == "--experts") {
        ZT_CHECK(i + 1 < argc, a, " needs a value");
        (a == "--tag"       ? tag
         : a == "--weights" ? weights
         : a == "--family"  ? family
                            : experts) = argv[++i];
      } else if (a == "-h" || a == "--help") {
        std::cout << usage << "\n";
        return 0;
      } else {
        ZT_CHECK(a.rfind("--", 0) != 0, "unknown option ", a, "; ", usage);
        pos.push_back(a);
      }
    }
    ZT_CHECK(pos.size() == 2, usage);
    const std::string& ckpt = pos[0];
    const std::string& out = pos[1];
    if (family.empty()) family = detect_family(ckpt);
    ZT_CHECK(family == "gpt" || family == "llama" || family == "bert", "--family must be gpt, ",
             "llama or bert, got '", family, "'");
    ZT_CHECK(weights == "master" || family == "gpt", "--weights ", weights,
             " is for the GPT family only (train_llama and train_bert keep no weight average)");
    ZT_CHECK(experts.empty() || family == "llama", "--experts is for the llama family only");
    ZT_CHECK(experts.empty() || experts == "per-expert" || experts == "fused",
             "--experts must be per-expert or fused, got '", experts, "'");
    if (family == "gpt") {
      zt::models::PretrainedGpt p = zt::models::read_pretrained_gpt(ckpt, tag, weights);
      zt::models::write_hf_gpt2(out, p.shape, p.values);
      std::cout << "wrote " << out << "/config.json and model.safetensors from " << p.source
                << " (GPT-2, " << weights << " weights, " << p.shape.n_layer << " layers, d_model "
                << p.shape.d_model << ", vocab " << p.shape.vocab_size << ")\n";
    } else if (family == "llama") {
      std::cout << zt::models::export_hf_llama(ckpt, tag, out, experts != "fused") << "\n";
    } else {
      zt::models::BertCheckpoint c = zt::models::read_bert_checkpoint(ckpt, tag);
      zt::models::write_hf_bert(out, c.config, c.values);
      std::cout << "wrote " << out << "/config.json and model.safetensors from " << c.source << " ("
                << c.config.model_type << ", " << c.config.num_hidden_layers << " layers, hidden "
                << c.config.hidden_size << ", " << c.values.size() << " tensors)\n";
    }
    return 0;
  });
}
