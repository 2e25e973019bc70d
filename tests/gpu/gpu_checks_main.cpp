// zt-gpu-checks: runs the GPU checks (gpu_checks.h) and prints one line per check; with
// --json FILE also one JSON object per check, written as soon as the check ends.
//
//   zt-gpu-checks [--json FILE] [--device zttest] [NAME...]
//                                 the named checks (all without a name), in list order, on cuda:0
//                                 or on the host-backed test device (a build with zt_train and
//                                 the test device; the checks of CUDA kernels then SKIP)
//   zt-gpu-checks --list          the check names, one per line (needs no GPU)
//
// bench/gpu_check.sh runs each check in a process of its own (a CUDA fault that leaves a sticky
// error, or a crash, ends only that check) and asks --list for the names.
// Exit status: 0 when all pass, 1 when one fails, 2 on a usage error (an unknown check name or
// option) or when the device is not usable (nothing ran).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/main_guard.h"
#include "tests/gpu/gpu_checks.h"
#ifdef ZT_GPU_CHECKS_TEST_DEVICE
#include "parallel/env.h"
#include "train/device.h"
#endif

namespace {

constexpr int kUsageError = 2;
constexpr int kNoGpu = 2;  // nothing ran

std::string known_names() {
  std::string names;
  for (const auto& check : zt::gpu_checks::all_checks()) {
    names += (names.empty() ? "" : ", ") + check.name;
  }
  return names;
}

bool is_known(const std::string& name) {
  const auto& checks = zt::gpu_checks::all_checks();
  return std::any_of(checks.begin(), checks.end(),
                     [&](const zt::gpu_checks::Check& c) { return c.name == name; });
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  }
  return out;
}

int run(int argc, char** argv) {
  std::string json_path;
  std::vector<std::string> only;
  bool list = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--list") {
      list = true;
    } else if (a == "--device") {
      if (i + 1 == argc) {
        std::fprintf(stderr, "zt-gpu-checks: --device needs a device (zttest)\n");
        return kUsageError;
      }
      const std::string spec = argv[++i];
#ifdef ZT_GPU_CHECKS_TEST_DEVICE
      if (spec.rfind(zt::kTestDeviceName, 0) != 0) {
        std::fprintf(stderr,
                     "zt-gpu-checks: --device %s: only %s (the checks run on cuda:0 "
                     "without --device)\n",
                     spec.c_str(), zt::kTestDeviceName);
        return kUsageError;
      }
      zt::gpu_checks::set_device(zt::resolve_device(spec, zt::dist::Env{}));
#else
      std::fprintf(stderr,
                   "zt-gpu-checks: --device %s: this build has no test device (it needs "
                   "the full dependencies and ZT_BUILD_TESTS)\n",
                   spec.c_str());
      return kUsageError;
#endif
    } else if (a == "--json") {
      if (i + 1 == argc) {
        std::fprintf(stderr, "zt-gpu-checks: --json needs a file name\n");
        return kUsageError;
      }
      json_path = argv[++i];
    } else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr,
                   "zt-gpu-checks: unknown option %s (options: --list, --json FILE, --device "
                   "zttest)\n",
                   a.c_str());
      return kUsageError;
    } else if (!is_known(a)) {
      std::fprintf(stderr, "zt-gpu-checks: unknown check '%s'; known checks: %s\n", a.c_str(),
                   known_names().c_str());
      return kUsageError;
    } else {
      only.push_back(a);
    }
  }
  if (list) {
    for (const auto& check : zt::gpu_checks::all_checks()) std::printf("%s\n", check.name.c_str());
    return 0;
  }
  const std::string why = zt::gpu_checks::device_unavailable();
  if (!why.empty()) {
    std::printf("zt-gpu-checks: no usable %s (%s); nothing ran\n",
                zt::gpu_checks::device().str().c_str(), why.c_str());
    return kNoGpu;
  }
  std::ofstream json;
  if (!json_path.empty()) {
    json.open(json_path);
    if (!json) {
      std::fprintf(stderr, "zt-gpu-checks: cannot write --json file %s\n", json_path.c_str());
      return kUsageError;
    }
  }
  int failed = 0;
  for (const auto& check : zt::gpu_checks::all_checks()) {
    if (!only.empty() && std::find(only.begin(), only.end(), check.name) == only.end()) continue;
    auto start = std::chrono::steady_clock::now();
    if (check.cuda_kernels && !zt::gpu_checks::device().is_cuda()) {
      std::printf("%-22s SKIP  checks CUDA kernels; the device is %s\n", check.name.c_str(),
                  zt::gpu_checks::device().str().c_str());
      if (json.is_open()) {
        json << "{\"check\":\"" << check.name << "\",\"pass\":true,\"skipped\":true,"
             << "\"seconds\":0,\"error\":\"\"}\n"
             << std::flush;
      }
      continue;
    }
    std::string error;
    try {
      check.run();
    } catch (const std::exception& e) {
      error = zt::first_line(e.what());
      if (error.empty()) error = "exception without a message";
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%-22s %s  %.2f s%s%s\n", check.name.c_str(), error.empty() ? "PASS" : "FAIL", s,
                error.empty() ? "" : "  ", error.c_str());
    std::fflush(stdout);
    if (!error.empty()) ++failed;
    if (json.is_open()) {
      // Flushed now: a later check that crashes the process must not take this line with it.
      json << "{\"check\":\"" << check.name << "\",\"pass\":" << (error.empty() ? "true" : "false")
           << ",\"seconds\":" << s << ",\"error\":\"" << json_escape(error) << "\"}\n"
           << std::flush;
    }
  }
  std::printf("zt-gpu-checks: %d failed\n", failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_main("zt-gpu-checks", [&] { return run(argc, argv); });
}
