#pragma once
// Parameter groups from parameter names, as the engine needs them for a flat buffer:
//   - no weight decay for biases and norms (substring patterns, configurable),
//   - layer-wise LR decay (LLRD): lr * decay^(depth from the top), depth from block indices in
//     names such as "blocks.3.attn.qkv.weight",
//   - frozen parameters by glob patterns ("embed*"): never stepped (left out of every group).
//
// Layer ids for LLRD (the BEiT / ELECTRA convention): a parameter whose name contains
// "<prefix><k>." for one of layer_prefixes is in layer k + 1; one whose name contains an
// embedding pattern is in layer 0; every other (final norm, head) is in the top layer
// num_layers + 1, where num_layers is given or inferred as the largest k + 1. The lr scale is
// llrd_decay ^ (num_layers + 1 - layer id): 1 at the top, decay^(num_layers + 1) for embeddings.

#include <cstdint>
#include <string>
#include <vector>

#include "optim/param_group_defaults.h"
#include "optim/shard_optimizer.h"

namespace zt::optim {

// One parameter of a flat buffer: elements [offset, offset + numel) of it.
struct ParamInfo {
  std::string name;
  int64_t numel = 0;
  int64_t offset = 0;
};

struct ParamGroupOptions {
  // A parameter whose name contains one of these gets weight_decay 0.
  std::vector<std::string> no_decay_patterns = default_no_decay_patterns();
  // Glob patterns (fnmatch: * and ? match any character, dots included) over the full name.
  std::vector<std::string> freeze_patterns;
  // LLRD: 1 disables it.
  double llrd_decay = 1.0;
  // Blocks in the model; <= 0: inferred from the names.
  int64_t num_layers = 0;
  std::vector<std::string> layer_prefixes = {"blocks.", "layers.", "layer.", "h."};
  std::vector<std::string> embedding_patterns = {"embed", "wte", "wpe", "tok_emb", "pos_emb"};
};

// One optimizer group: parameters sharing weight-decay flag and lr scale.
struct ParamGroup {
  std::string label;            // e.g. "decay/lr_scale=0.81"
  bool decay = true;            // false: weight_decay 0
  double lr_scale = 1.0;        // multiplies the scheduled lr
  std::vector<int64_t> params;  // indices into the ParamInfo list, in input order
};

struct ParamGrouping {
  std::vector<ParamGroup> groups;
  std::vector<int64_t> group_of;  // per parameter: index into groups, or -1 when frozen
  std::vector<int64_t> layer_id;  // per parameter (LLRD layer id, see the file comment)
  int64_t num_layers = 0;
  int64_t frozen_numel = 0;
};

ParamGrouping build_param_groups(const std::vector<ParamInfo>& params,
                                 const ParamGroupOptions& options);

// The GroupRanges of one rank's shard [shard_begin, shard_end) of the flat buffer, in shard-local
// coordinates, sorted, for one step: hyper = base with lr = lr * group lr_scale and weight_decay
// = base.weight_decay or 0. Adjacent pieces of the same group are merged; frozen parameters and
// padding are in no range.
std::vector<GroupRange> shard_group_ranges(const ParamGrouping& grouping,
                                           const std::vector<ParamInfo>& params,
                                           int64_t shard_begin, int64_t shard_end,
                                           const GroupHyper& base, double lr);

// fnmatch-style glob: '*' any run of characters, '?' one character.
bool glob_match(const std::string& pattern, const std::string& name);

}  // namespace zt::optim
