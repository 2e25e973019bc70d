#pragma once
// The config's `freeze` list (glob patterns over full parameter names, core/config/config.h),
// applied by zt::initialize to a model before it builds the engine: matching parameters get
// requires_grad = false, and the engine then keeps them out of every flat buffer, gradient and
// optimizer (they stay full on every rank at every stage, broadcast once from rank 0, never
// stepped).
//
//   freeze: ["wte.*", "wpe.*"]     # the GPT example's token and position embeddings
//
// Globs use optim::glob_match: '*' and '?' match any character, dots included.

#include <string>
#include <vector>

#include <torch/nn/module.h>

namespace zt {

// Freezes every parameter of `model` whose full name matches one of `patterns`, and returns the
// names frozen. A pattern that matches no parameter is an error naming the pattern (a typo
// would otherwise train what was meant to stay fixed).
std::vector<std::string> freeze_parameters(torch::nn::Module& model,
                                           const std::vector<std::string>& patterns);

}  // namespace zt
