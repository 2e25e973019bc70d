#pragma once
// The ABI between Adam8bit (zt_optim) and its CUDA kernel in the plugin (optim/adam8bit.cu,
// optim/adam8bit_cuda.cpp): plain structs and the launcher's signature, nothing from ATen, so nvcc
// compiles the kernel without LibTorch. Adam8bit finds the launcher as FusedAdam does (see
// fused_adam.h): OptimizerSpec::cuda_launcher, else dlsym(RTLD_DEFAULT, kAdam8bitSymbol).

#include <cstdint>

#include "optim/adam_formula.h"

namespace zt::optim {

inline constexpr const char* kAdam8bitSymbol = "zt_adam8bit";
// Largest block_size the kernel takes: one CUDA block holds a quantization block's m and v in
// shared memory (2 * 4096 * 4 bytes = 32 KiB).
inline constexpr int64_t kAdam8bitMaxCudaBlock = 4096;

// One group of one step; the CPU pass uses the same struct.
struct Adam8bitGroup {
  int64_t begin, end;  // elements of the shard; groups sorted by begin, disjoint
  AdamConstants c;     // adam_constants() of the group and step
};

// Codebook on the device, fp32 [4][256]: signed map, signed midpoints (255 + 1 unused), unsigned
// map, unsigned midpoints (blockwise_quant.h). Encoding is the bisection over the midpoints
// (QuantCodec::encode_by_bisection), which gives the same codes as the CPU's table encoder.
inline constexpr int kAdam8bitCodebookFloats = 4 * 256;

struct Adam8bitLaunch {
  float* param;
  const float* grad;
  int64_t n;
  int64_t block;  // quantization block (elements)
  // Quantized state (m_code != nullptr) ...
  uint8_t* m_code;
  float* m_absmax;
  uint8_t* v_code;
  float* v_absmax;
  const float* codebook;
  // ... or fp32 state for small shards (m_code == nullptr).
  float* m32;
  float* v32;
  const Adam8bitGroup* groups;  // device array
  int32_t num_groups;
  int32_t half_kind;  // 0 none, 1 fp16, 2 bf16
  void* half_out;     // [n] or nullptr
};

// Enqueues one step on `stream` (a cudaStream_t; nullptr: LibTorch's current stream) and returns
// nullptr, or the CUDA error's text.
using Adam8bitLauncher = const char* (*)(const Adam8bitLaunch* launch, void* stream);

}  // namespace zt::optim
