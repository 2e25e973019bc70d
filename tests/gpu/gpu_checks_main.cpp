// zt-gpu-checks: runs every GPU check (gpu_checks.h) and prints one line per check; with
// --json FILE also one JSON object per check. Exit status 0 when all pass, 1 when one fails,
// 2 when no GPU is usable (nothing ran). Filters: names given as arguments.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/base/main_guard.h"
#include "tests/gpu/gpu_checks.h"

namespace {

int run(int argc, char** argv) {
  std::string json_path;
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      only.push_back(a);
    }
  }
  const std::string why = zt::gpu_checks::cuda_unavailable();
  if (!why.empty()) {
    std::printf("zt-gpu-checks: no usable GPU (%s); nothing ran\n", why.c_str());
    return 2;
  }
  std::ofstream json;
  if (!json_path.empty()) json.open(json_path);
  int failed = 0;
  for (const auto& check : zt::gpu_checks::all_checks()) {
    if (!only.empty() && std::find(only.begin(), only.end(), check.name) == only.end()) continue;
    auto start = std::chrono::steady_clock::now();
    std::string error;
    try {
      check.run();
    } catch (const std::exception& e) {
      error = e.what();
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%-20s %s  %.2f s%s%s\n", check.name.c_str(), error.empty() ? "PASS" : "FAIL", s,
                error.empty() ? "" : "  ", error.c_str());
    std::fflush(stdout);
    if (!error.empty()) ++failed;
    if (json.is_open()) {
      std::string quoted;
      for (char c : error) {
        if (c == '"' || c == '\\') quoted += '\\';
        quoted += c == '\n' ? ' ' : c;
      }
      json << "{\"check\":\"" << check.name << "\",\"pass\":" << (error.empty() ? "true" : "false")
           << ",\"seconds\":" << s << ",\"error\":\"" << quoted << "\"}\n";
    }
  }
  std::printf("zt-gpu-checks: %d failed\n", failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_main("zt-gpu-checks", [&] { return run(argc, argv); });
}
