#pragma once
// Peak dense matrix throughput of known accelerators, the denominator of model-FLOPs
// utilisation (MFU). Figures are the vendors' datasheet numbers for dense (not 2:4 sparse) tensor
// work in the training dtype: bf16/fp16 on tensor cores, fp32 without TF32 (LibTorch's default
// for fp32 matmuls). A device not in the table (any CPU) has no known peak: MFU then needs
// flops_profiler.peak_tflops (or a program's --peak-tflops).

#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace zt::profile {

// TFLOP/s per device, or 0 when `device_name` (as CUDA reports it, e.g. "NVIDIA H100 80GB
// HBM3") is not in the table or the dtype has no tensor-core rate there.
double known_peak_tflops(const std::string& device_name, at::ScalarType dtype);

// The device's name: CUDA's for a GPU (through the CUDA plugin), "cpu" otherwise.
std::string device_name(const c10::Device& device);

}  // namespace zt::profile
