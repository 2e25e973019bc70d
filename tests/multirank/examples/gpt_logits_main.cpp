// zt_gpt_logits PRETRAINED IDS.safetensors OUT.safetensors: the GPT example's logits, in fp32, for
// the token ids in IDS ("input_ids", (B, T) int64), with the weights of PRETRAINED (a Hugging Face
// GPT-2 directory or a checkpoint directory, models/gpt/pretrained.h) loaded by name into a
// model of the shape they describe. Writes OUT with "logits" (B, T, V). Test helper of the
// Hugging Face round trip (gpt_hf_roundtrip_test.sh): Python compares these logits with
// transformers' GPT2LMHeadModel on the same ids.

#include <iostream>
#include <string>

#include <torch/torch.h>

#include "base/error.h"
#include "base/main_guard.h"
#include "models/gpt/gpt_model.h"
#include "models/gpt/pretrained.h"
#include "train/load_by_name.h"
#include "weights/safetensors_reader.h"
#include "weights/safetensors_writer.h"

int main(int argc, char** argv) {
  return zt::run_main("zt_gpt_logits", [&] {
    ZT_CHECK(argc == 4, "usage: zt_gpt_logits PRETRAINED IDS.safetensors OUT.safetensors");
    using namespace zt::models;
    using namespace zt::train;
    PretrainedGpt p = read_pretrained_gpt(argv[1]);
    p.shape.dropout = 0;
    Gpt model(p.shape);
    LoadReport r = load_by_name(*model, p.values, {});
    std::cout << p.source << ": " << r.summary() << "\n";
    model->eval();
    torch::NoGradGuard no_grad;
    at::Tensor ids = zt::SafetensorsReader(argv[2]).read("input_ids");
    at::Tensor logits = model->forward(ids, {}).to(at::kFloat).contiguous();
    zt::SafetensorsWriter w(argv[3], {{"logits", at::kFloat, logits.sizes().vec()}});
    w.write("logits", logits);
    w.commit();
    return 0;
  });
}
