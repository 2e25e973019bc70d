// zt-export-hf CKPT_DIR OUT_DIR [--tag T] [--weights master|swa]: a checkpoint of the GPT example
// (any stage, any world size) as a Hugging Face GPT-2 directory: OUT_DIR/config.json and
// OUT_DIR/model.safetensors in GPT-2's names and Conv1D layout (hf_gpt2.h), loadable with
// transformers' GPT2LMHeadModel.from_pretrained(OUT_DIR). The fp32 master weights, or with
// --weights swa the stochastic weight average the run kept (optim/swa.h).

#include <iostream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/main_guard.h"
#include "examples/gpt/hf_gpt2.h"
#include "examples/gpt/pretrained.h"

int main(int argc, char** argv) {
  return zt::run_main("zt-export-hf", [&] {
    const char* usage = "usage: zt-export-hf CKPT_DIR OUT_DIR [--tag T] [--weights master|swa]";
    std::vector<std::string> pos;
    std::string tag, weights = "master";
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--tag" || a == "--weights") {
        ZT_CHECK(i + 1 < argc, a, " needs a value");
        (a == "--tag" ? tag : weights) = argv[++i];
      } else if (a == "-h" || a == "--help") {
        std::cout << usage << "\n";
        return 0;
      } else {
        ZT_CHECK(a.rfind("--", 0) != 0, "unknown option ", a, "; ", usage);
        pos.push_back(a);
      }
    }
    ZT_CHECK(pos.size() == 2, usage);
    zt::examples::PretrainedGpt p = zt::examples::read_pretrained_gpt(pos[0], tag, weights);
    zt::examples::write_hf_gpt2(pos[1], p.shape, p.values);
    std::cout << "wrote " << pos[1] << "/config.json and model.safetensors from " << p.source
              << " (" << weights << " weights, " << p.shape.n_layer << " layers, d_model "
              << p.shape.d_model << ", vocab " << p.shape.vocab_size << ")\n";
    return 0;
  });
}
