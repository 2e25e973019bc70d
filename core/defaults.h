#pragma once
// The engine's size defaults, declared once: the zero_optimization block
// (core/config/zero_config.h), which EngineOptions (core/engine_options.h) is built on, and the
// communication block's in-flight bound, which both the config and EngineOptions carry.

#include <cstdint>

namespace zt {

// DeepSpeed's defaults for the sizes both a config (core/config/config.h) and a program that
// fills EngineOptions itself leave out, declared once (deepspeed/runtime/zero/config.py,
// offload_config.py). Sizes count elements.
namespace defaults {
inline constexpr int64_t kReduceBucketSize = 500'000'000;
inline constexpr int64_t kPrefetchBucketSize = 50'000'000;
inline constexpr int64_t kSubGroupSize = 1'000'000'000;
inline constexpr int64_t kOptimizerBufferCount = 4;  // offload_optimizer.buffer_count
inline constexpr int64_t kParamBufferCount = 5;      // offload_param.buffer_count
inline constexpr int64_t kParamBufferSize = 100'000'000;
inline constexpr int64_t kMaxInCpu = 1'000'000'000;
// Ours: gradient buckets whose reduction may be in flight at once (communication block).
inline constexpr int64_t kMaxInflightReductions = 4;
}  // namespace defaults

}  // namespace zt
