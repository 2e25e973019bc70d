// zt-export-hf-llama CKPT_DIR OUT_DIR [--tag T]: a checkpoint of train_llama (any stage, any world
// size) as a Hugging Face directory that transformers' AutoModelForCausalLM.from_pretrained
// loads: OUT_DIR/config.json (the model's, which train_llama keeps in CKPT_DIR) and
// OUT_DIR/model.safetensors (the fp32 master weights, under transformers' names).

#include <iostream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/main_guard.h"
#include "examples/llama/hf_llama.h"

int main(int argc, char** argv) {
  return zt::run_main("zt-export-hf-llama", [&] {
    const char* usage = "usage: zt-export-hf-llama CKPT_DIR OUT_DIR [--tag T]";
    std::vector<std::string> pos;
    std::string tag;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--tag") {
        ZT_CHECK(i + 1 < argc, a, " needs a value");
        tag = argv[++i];
      } else if (a == "-h" || a == "--help") {
        std::cout << usage << "\n";
        return 0;
      } else {
        ZT_CHECK(a.rfind("--", 0) != 0, "unknown option ", a, "; ", usage);
        pos.push_back(a);
      }
    }
    ZT_CHECK(pos.size() == 2, usage);
    std::cout << zt::examples::export_hf_llama(pos[0], tag, pos[1]) << "\n";
    return 0;
  });
}
