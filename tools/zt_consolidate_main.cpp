// zt-consolidate CKPT_DIR OUT.safetensors [--tag T]: the zero_to_fp32 of zerotorch. Gathers the
// fp32 master weights of a checkpoint saved at any world size and stage into one safetensors
// file with the model's parameter names, one parameter at a time, so peak memory stays near the
// largest parameter rather than the model. Prints the peak resident set size it reached.

#include <iostream>
#include <string>
#include <sys/resource.h>
#include <vector>

#include "base/error.h"
#include "base/main_guard.h"
#include "core/checkpoint/checkpoint.h"

int main(int argc, char** argv) {
  return zt::run_main("zt-consolidate", [&] {
    std::vector<std::string> pos;
    std::string tag;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--tag") {
        ZT_CHECK(i + 1 < argc, "--tag needs a value");
        tag = argv[++i];
      } else if (a == "-h" || a == "--help") {
        std::cout << "usage: zt-consolidate CKPT_DIR OUT.safetensors [--tag T]\n";
        return 0;
      } else {
        pos.push_back(a);
      }
    }
    ZT_CHECK(pos.size() == 2, "usage: zt-consolidate CKPT_DIR OUT.safetensors [--tag T]");
    zt::consolidate_to_safetensors(pos[0], tag, pos[1]);
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    std::cout << "wrote " << pos[1] << " (peak_rss_kib " << ru.ru_maxrss << ")\n";
    return 0;
  });
}
