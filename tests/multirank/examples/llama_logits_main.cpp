// zt_llama_logits HF_DIR IDS.safetensors OUT.safetensors: the LLaMA example's fp32 logits for the
// token ids in IDS ("input_ids" (B, T) int64, "attention_mask" (B, T)), with the weights of the
// Hugging Face directory HF_DIR loaded into a model of the shape its config.json describes.
// Writes OUT with "logits" (no mask) and "logits_masked" (with the mask), and for a mixture of
// experts "aux_loss" and "aux_loss_masked", the load-balancing loss of each forward
// (models/load_balancing_loss.h). Test helper of llama_hf_roundtrip_test.sh: Python compares them
// with transformers' on the same inputs.

#include <iostream>
#include <map>
#include <string>
#include <vector>

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
    LlamaShape shape = llama_shape_from_hf_config(dir + "/config.json");
    shape.moe.output_router_logits = shape.is_moe();
    LlamaForCausalLM model(shape);
    std::cout << load_hf_llama(dir, *model) << "\n";
    model->eval();
    torch::NoGradGuard no_grad;
    const zt::SafetensorsReader in(argv[2]);
    at::Tensor ids = in.read("input_ids");
    std::map<std::string, at::Tensor> out;
    // The term the model adds is coef times the loss (one process: no data-parallel scaling).
    auto aux = [&] {
      return (model->router_aux_loss() / shape.moe.router_aux_loss_coef).reshape({1});
    };
    out["logits"] = model->forward(ids, {}).to(at::kFloat).contiguous();
    if (shape.is_moe()) out["aux_loss"] = aux();
    out["logits_masked"] =
        model->forward(ids, in.read("attention_mask")).to(at::kFloat).contiguous();
    if (shape.is_moe()) out["aux_loss_masked"] = aux();
    std::vector<zt::SafetensorsWriter::Entry> entries;
    for (const auto& [name, t] : out) entries.push_back({name, at::kFloat, t.sizes().vec()});
    zt::SafetensorsWriter w(argv[3], std::move(entries));
    for (const auto& [name, t] : out) w.write(name, t);
    w.commit();
    return 0;
  });
}
