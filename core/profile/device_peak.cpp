#include "core/profile/device_peak.h"

#include <array>
#include <cstring>

#include "base/cuda_plugin.h"

namespace zt::profile {
namespace {

struct Peak {
  const char* name_part;  // matched as a substring of the device name, first match wins
  double half;            // bf16 / fp16 dense tensor-core TFLOP/s (0: no bf16 there)
  double fp16_only;       // fp16 where bf16 is unsupported (V100), else 0
  double fp32;            // fp32 TFLOP/s without TF32
};

// More specific names first ("H100 PCIe" before "H100").
constexpr std::array<Peak, 12> kPeaks = {{
    {"GH200", 989.4, 0, 66.9},
    {"H200", 989.4, 0, 66.9},
    {"H100 PCIe", 756.5, 0, 51.2},
    {"H100", 989.4, 0, 66.9},
    {"H800", 989.4, 0, 66.9},
    {"A100", 312.0, 0, 19.5},
    {"A800", 312.0, 0, 19.5},
    {"L40S", 362.05, 0, 91.6},
    {"L40", 181.05, 0, 90.5},
    {"L4", 121.0, 0, 30.3},
    {"A10", 125.0, 0, 31.2},
    {"V100", 0, 125.0, 15.7},
}};

}  // namespace

double known_peak_tflops(const std::string& name, at::ScalarType dtype) {
  for (const Peak& p : kPeaks) {
    if (name.find(p.name_part) == std::string::npos) continue;
    switch (dtype) {
      case at::kBFloat16: return p.half;
      case at::kHalf: return p.half > 0 ? p.half : p.fp16_only;
      case at::kFloat: return p.fp32;
      default: return 0;
    }
  }
  return 0;
}

std::string device_name(const c10::Device& device) {
  if (!device.is_cuda()) return "cpu";
  using NameFn = int32_t (*)(int32_t, char*, size_t);
  auto fn = reinterpret_cast<NameFn>(cuda::find_symbol("zt_cuda_device_name"));
  char buf[256] = {};
  if (fn == nullptr || fn(device.index() < 0 ? 0 : device.index(), buf, sizeof(buf)) != 0) {
    return "cuda";
  }
  return std::string(buf, strnlen(buf, sizeof(buf)));
}

}  // namespace zt::profile
