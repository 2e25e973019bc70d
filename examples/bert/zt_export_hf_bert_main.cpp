// zt-export-hf-bert CKPT_DIR OUT_DIR [--tag T]: a checkpoint of train_bert (any stage, any world
// size) as a Hugging Face directory: OUT_DIR/config.json (the config kept with the checkpoints)
// and OUT_DIR/model.safetensors with the fp32 master weights under their own names (hf_bert.h),
// loadable with transformers' AutoModelForSequenceClassification.from_pretrained(OUT_DIR).

#include <iostream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/main_guard.h"
#include "examples/bert/hf_bert.h"

int main(int argc, char** argv) {
  return zt::run_main("zt-export-hf-bert", [&] {
    const char* usage = "usage: zt-export-hf-bert CKPT_DIR OUT_DIR [--tag T]";
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
    zt::examples::BertCheckpoint c = zt::examples::read_bert_checkpoint(pos[0], tag);
    zt::examples::write_hf_bert(pos[1], c.config, c.values);
    std::cout << "wrote " << pos[1] << "/config.json and model.safetensors from " << c.source
              << " (" << c.config.model_type << ", " << c.config.num_hidden_layers
              << " layers, hidden " << c.config.hidden_size << ", " << c.values.size()
              << " tensors)\n";
    return 0;
  });
}
