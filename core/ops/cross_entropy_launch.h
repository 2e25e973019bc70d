#pragma once
// The ABI between the fused token cross-entropy (core/ops/cross_entropy.h, zt_core) and its kernel
// in the CUDA plugin (core/ops/cross_entropy.cu): plain structs, nothing from ATen, so nvcc
// compiles the kernel without LibTorch.

#include <cstdint>

namespace zt::ops {

inline constexpr const char* kCrossEntropySymbol = "zt_cross_entropy";

// The logits' element type; the gradient is written in the same type.
enum class LogitsType : int32_t { kFloat = 0, kHalf = 1, kBFloat16 = 2 };

// One launch covers every row. Per row r, with x = logits[r], y = labels[r] and
// lse = log(sum_j exp(x_j)) taken in fp32:
//   loss[r]    = lse - x_y          (0 where y == ignore_index; NaN where y is out of [0, vocab))
//   lse_out[r] = lse                (0 where ignored)
//   grad[r, j] = (exp(x_j - lse) - [j == y]) * grad_scale[r], rounded to the logits' type
//                                   (0 where ignored; NaN where y is out of range)
// A launch fills loss (and lse_out) or grad or both; what is nullptr is not written. With lse_in,
// the gradient takes the row's lse from it (a forward's lse_out) instead of reading the row twice.
struct CrossEntropyLaunch {
  const void* logits;  // rows x vocab, row r at logits + r * row_stride elements
  int32_t dtype;       // LogitsType
  int64_t rows;
  int64_t vocab;
  int64_t row_stride;
  const int64_t* labels;  // rows
  int64_t ignore_index;
  float* loss;              // rows, or nullptr
  float* lse_out;           // rows, or nullptr
  void* grad;               // rows x vocab, contiguous, of dtype; or nullptr
  const float* grad_scale;  // rows, with grad
  const float* lse_in;      // rows, or nullptr
};

// The plugin's entry point: enqueues the kernel on `stream` (a cudaStream_t; nullptr: LibTorch's
// current stream of the logits' device) and returns nullptr, or the CUDA error's text.
using CrossEntropyLauncher = const char* (*)(const CrossEntropyLaunch* launch, void* stream);

}  // namespace zt::ops
