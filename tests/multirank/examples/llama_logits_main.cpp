// zt_llama_logits HF_DIR IDS.safetensors OUT.safetensors: the LLaMA example's fp32 logits for the
// token ids in IDS ("input_ids" (B, T) int64, "attention_mask" (B, T)), with the weights of the
// Hugging Face directory HF_DIR loaded into a model of the shape its config.json describes.
// Writes OUT with "logits" (no mask) and "logits_masked" (with the mask). Test helper of
// llama_hf_roundtrip_test.sh: Python compares them with transformers' on the same inputs.

#include <iostream>
#include <string>

#include <torch/torch.h>

#include "base/error.h"
#include "base/main_guard.h"
#include "models/llama/hf_llama.h"
#include "weights/safetensors_reader.h"
#include "weights/safetensors_writer.h"

int main(int argc, char** argv) {
  return zt::run_main("zt_llama_logits", [&] {
    ZT_CHECK(argc == 4, "usage: zt_llama_logits HF_DIR IDS.safetensors OUT.safetensors");
    using namespace zt::models;
    const std::string dir = argv[1];
    LlamaForCausalLM model(llama_shape_from_hf_config(dir + "/config.json"));
    std::cout << load_hf_llama(dir, *model) << "\n";
    model->eval();
    torch::NoGradGuard no_grad;
    const zt::SafetensorsReader in(argv[2]);
    at::Tensor ids = in.read("input_ids");
    at::Tensor logits = model->forward(ids, {}).to(at::kFloat).contiguous();
    at::Tensor masked = model->forward(ids, in.read("attention_mask")).to(at::kFloat).contiguous();
    zt::SafetensorsWriter w(argv[3], {{"logits", at::kFloat, logits.sizes().vec()},
                                      {"logits_masked", at::kFloat, masked.sizes().vec()}});
    w.write("logits", logits);
    w.write("logits_masked", masked);
    w.commit();
    return 0;
  });
}
