#pragma once
// Loading pretrained values into a model by parameter name, before zt::initialize shards it
// (every rank holds the whole model then, so a checkpoint of any stage and world size, once
// consolidated, loads the same way into any other).
//
//   LoadByNameOptions o{.prefix = "trunk.", .expected_new = {"head.*"}};
//   LoadReport r = load_by_name(*model, pretrained.values, o);   // throws on any surprise
//   ZT_LOG_INFO(r.summary());   // "loaded 52 (...), new 2 (head.weight, head.bias), skipped 0"
//
// Rules: a model parameter `prefix + name` takes the source's `name`. A shape mismatch is an
// error, as is a model parameter the source lacks (unless it matches an expected_new glob: it
// keeps its initialisation) and a source value the model has no parameter for (unless it
// matches an expected_skipped glob). A source name listed in expected_skipped is skipped even
// when the model has it (e.g. a position table of another length). Globs: optim::glob_match.

#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace zt::train {

struct LoadByNameOptions {
  std::string prefix;                         // model name = prefix + source name
  std::vector<std::string> expected_new;      // globs over model names
  std::vector<std::string> expected_skipped;  // globs over source names
};

struct LoadReport {
  std::vector<std::string> loaded;   // model names
  std::vector<std::string> fresh;    // model names left at their initialisation
  std::vector<std::string> skipped;  // source names not loaded
  // "loaded N parameters (M values), new K (names), skipped J (names)"
  std::string summary() const;
};

LoadReport load_by_name(torch::nn::Module& model, const std::map<std::string, at::Tensor>& source,
                        const LoadByNameOptions& options);

}  // namespace zt::train
