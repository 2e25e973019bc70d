// zt-from-deepspeed SRC OUT_DIR [--tag T] [--rename FROM=TO]... [--gradient-accumulation-steps N]
//                   [--step N --shapes-from WEIGHTS]
// A DeepSpeed user's checkpoint as a zerotorch checkpoint (core/checkpoint/deepspeed_import.h):
//   SRC a universal checkpoint (ds_to_universal.py's output folder, with zero/): parameters,
//       Adam's moments and the step, so training resumes where DeepSpeed stopped, at any world
//       size and stage;
//   SRC zero_to_fp32.py's output (model.safetensors, pytorch_model.bin, or their folder):
//       the weights alone, step 0.
// OUT_DIR/<tag> is written and OUT_DIR/latest names it: point checkpoint.save_dir at OUT_DIR to
// resume, or pass OUT_DIR to --init-from. --rename replaces a leading FROM of every DeepSpeed
// parameter name by TO (repeatable, first match wins; TO may be empty, "module.=" strips a
// wrapper's prefix). A ZeRO stage-3 run's universal checkpoint has no step.pt and flat values:
// --step gives DeepSpeed's global_steps, --shapes-from the weights zero_to_fp32.py wrote for the
// same checkpoint (only their shapes are used). Prints the time it took and the peak resident
// set size.

#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <sys/resource.h>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/main_guard.h"
#include "core/checkpoint/deepspeed_import.h"
#include "weights/deepspeed_universal.h"
#include "weights/safetensors_reader.h"
#include "weights/safetensors_set.h"
#include "weights/state_dict_file.h"

namespace {

constexpr const char* kUsage =
    "usage: zt-from-deepspeed SRC OUT_DIR [--tag T] [--rename FROM=TO]... "
    "[--gradient-accumulation-steps N] [--step N --shapes-from WEIGHTS]\n"
    "  SRC: a DeepSpeed universal checkpoint folder (ds_to_universal.py), or zero_to_fp32.py's\n"
    "       model.safetensors / pytorch_model.bin (or their folder)\n";

std::string value_of(int argc, char** argv, int& i) {
  ZT_CHECK(i + 1 < argc, argv[i], " needs a value");
  return argv[++i];
}

// Parameter shapes by name from a weights file or folder; a safetensors header is enough.
std::map<std::string, std::vector<int64_t>> shapes_of(const std::string& path) {
  std::map<std::string, std::vector<int64_t>> out;
  auto add = [&](const zt::SafetensorsReader& r) {
    for (const auto& e : r.entries()) out[e.name] = e.shape;
  };
  if (std::filesystem::is_directory(path) && zt::SafetensorsSet::present(path)) {
    zt::SafetensorsSet set(path);
    for (const auto& f : set.files()) add(*f);
  } else if (path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0) {
    add(zt::SafetensorsReader(path));
  } else {
    for (const auto& [name, t] : zt::read_state_dict_file(path)) out[name] = t.sizes().vec();
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_main("zt-from-deepspeed", [&] {
    std::vector<std::string> pos;
    std::vector<std::pair<std::string, std::string>> renames;
    zt::DeepSpeedImportOptions o;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--tag") {
        o.tag = value_of(argc, argv, i);
      } else if (a == "--rename") {
        const std::string r = value_of(argc, argv, i);
        const size_t eq = r.find('=');
        ZT_CHECK(eq != std::string::npos && eq > 0, "--rename ", r, ": expected FROM=TO");
        renames.emplace_back(r.substr(0, eq), r.substr(eq + 1));
      } else if (a == "--step") {
        o.step = std::stoll(value_of(argc, argv, i));
      } else if (a == "--shapes-from") {
        o.shapes = shapes_of(value_of(argc, argv, i));
      } else if (a == "--gradient-accumulation-steps") {
        o.gradient_accumulation_steps = std::stoll(value_of(argc, argv, i));
      } else if (a == "-h" || a == "--help") {
        std::cout << kUsage;
        return 0;
      } else {
        ZT_CHECK(a.rfind("--", 0) != 0, "unknown option ", a, "\n", kUsage);
        pos.push_back(a);
      }
    }
    ZT_CHECK(pos.size() == 2, kUsage);
    if (!renames.empty()) {
      o.rename = [renames](const std::string& name) {
        for (const auto& [from, to] : renames)
          if (name.rfind(from, 0) == 0) return to + name.substr(from.size());
        return name;
      };
    }
    const auto t0 = std::chrono::steady_clock::now();
    const bool universal = zt::DeepSpeedUniversal::present(pos[0]);
    const std::string tag = universal ? zt::import_deepspeed_universal(pos[0], pos[1], o)
                                      : zt::import_deepspeed_weights(pos[0], pos[1], o);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    std::cout << "wrote " << pos[1] << "/" << tag << " from "
              << (universal ? "a universal checkpoint" : "weights") << " in " << s
              << " s (peak_rss_kib " << ru.ru_maxrss << ")\n";
    return 0;
  });
}
