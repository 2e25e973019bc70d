// zt_bert_logits SOURCE INPUTS.safetensors OUT.safetensors: the BERT example's logits, in fp32,
// for the inputs in INPUTS ("input_ids" and "attention_mask" (B, T) int64, optionally
// "token_type_ids"), with the weights of SOURCE: a Hugging Face directory (config.json, loaded as
// train_bert loads it, models/bert/hf_bert.h) or a checkpoint directory of train_bert (its
// consolidated masters). Writes OUT with "logits" (B, num_labels). Test helper of the Hugging
// Face round trip (bert_hf_roundtrip_test.sh): Python compares these logits with transformers'.

#include <filesystem>
#include <iostream>
#include <string>

#include <torch/torch.h>

#include "base/error.h"
#include "base/main_guard.h"
#include "models/bert/bert_model.h"
#include "models/bert/hf_bert.h"
#include "train/load_by_name.h"
#include "weights/safetensors_reader.h"
#include "weights/safetensors_writer.h"

int main(int argc, char** argv) {
  return zt::run_main("zt_bert_logits", [&] {
    ZT_CHECK(argc == 4, "usage: zt_bert_logits SOURCE INPUTS.safetensors OUT.safetensors");
    using namespace zt::models;
    const std::string source = argv[1];
    BertForSequenceClassification model{nullptr};
    if (std::filesystem::is_regular_file(std::filesystem::path(source) / "config.json")) {
      model = BertForSequenceClassification(read_hf_bert_config(source));
      std::cout << load_hf_bert(source, *model, nullptr) << "\n";
    } else {
      BertCheckpoint c = read_bert_checkpoint(source);
      model = BertForSequenceClassification(c.config);
      zt::train::LoadReport r = zt::train::load_by_name(*model, c.values, {});
      std::cout << c.source << ": " << r.summary() << "\n";
    }
    model->eval();
    torch::NoGradGuard no_grad;
    zt::SafetensorsReader in(argv[2]);
    at::Tensor types;
    for (const auto& e : in.entries()) {
      if (e.name == "token_type_ids") types = in.read(e.name);
    }
    at::Tensor logits =
        model->forward(in.read("input_ids"), in.read("attention_mask"), types).to(at::kFloat);
    logits = logits.contiguous();
    zt::SafetensorsWriter w(argv[3], {{"logits", at::kFloat, logits.sizes().vec()}});
    w.write("logits", logits);
    w.commit();
    return 0;
  });
}
