#pragma once
// The ABI between Adam8bit (zt_optim) and its CUDA kernel in the plugin (optim/adam8bit.cu,
// optim/adam8bit_cuda.cpp): plain structs and the launcher's signature, nothing from ATen, so nvcc
// compiles the kernel without LibTorch. Adam8bit finds the launcher as FusedAdam does (see
// fused_adam.h): OptimizerSpec::cuda_launcher, else dlsym(RTLD_DEFAULT, kAdam8bitSymbol).

#include <cstdint>

namespace zt::optim {

inline constexpr const char* kAdam8bitSymbol = "zt_adam8bit";
// Largest block_size the kernel takes: one CUDA block holds a quantization block's m and v in
// shared memory (2 * 4096 * 4 bytes = 32 KiB).
inline constexpr int64_t kAdam8bitMaxCudaBlock = 4096;

// One group's constants, as adam8bit.cpp's StepConsts (fp32, same rounding).
struct Adam8bitGroup {
  int64_t begin, end;  // elements of the shard; groups sorted by begin, disjoint
  float beta1, omb1, beta2, omb2, eps;
  float neg_step_size;  // -lr / (1 - beta1^t)
  float inv_sqrt_bc2;   // 1 / sqrt(1 - beta2^t)
  float decay_factor;   // AdamW: 1 - lr * wd, else 1
  float l2;             // Adam: wd, else 0
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
