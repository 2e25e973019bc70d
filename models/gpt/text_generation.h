#pragma once
// Autoregressive sampling from the GPT example: greedy (top_k = 1) or top-k with temperature.
// Runs the model directly: the caller holds the parameters gathered (Engine::GatheredParameters
// at stage 3). Deterministic for a given seed, so every rank produces the same text.

#include <cstdint>
#include <vector>

#include "models/gpt/gpt_model.h"

namespace zt::models {

struct GenerationOptions {
  int64_t max_new_tokens = 40;
  int64_t top_k = 1;  // 1 = greedy
  double temperature = 1.0;
  uint64_t seed = 0;
  int64_t eos_id = -1;  // stop when sampled (-1 = never)
};

// prompt: token ids (at least one); returns prompt + generated ids.
std::vector<int64_t> generate(GptImpl& model, std::vector<int64_t> prompt,
                              const GenerationOptions& options);

}  // namespace zt::models
