#pragma once
// Sharded, atomic checkpoints (docs/DESIGN.md, Checkpoint); the file layout is in
// core/checkpoint/format.h.
//
//   zt::save_checkpoint(engine, "ckpts", "global_step100", {{"sampler", sampler.state()}});
//   zt::ClientState client = zt::load_checkpoint(engine, "ckpts");   // the `latest` tag
//
// Save (collective; every rank calls it with the same dir and tag):
//   1. each rank writes <tag>/shard_r<rank>.zts.tmp, fsyncs it, renames it (a kill -9 here
//      leaves only a tag directory without metadata, which no load accepts). With hybrid
//      sharding (zero_optimization.mics_shard_size) ranks are numbered within their shard group
//      and only the first group writes: the checkpoint is that of mics_shard_size ranks;
//   2. barrier; rank 0 checksums every shard and writes metadata.ztm (temp, fsync, rename): the
//      tag is complete from this rename on;
//   3. rank 0 writes `latest` (temp, fsync, rename), then drops tags beyond keep_last; barrier.
//
// Load (collective): every rank validates the metadata, every shard's size and checksum, and the
// model's parameter names and shapes before touching the engine, so a bad checkpoint throws the
// same zt::Error on every rank and nothing is loaded half-way. Then:
//   - same world size and the same flat-buffer layouts: each rank reads its own shard (exact
//     resume; bit-identical continuation, RNG and counters included);
//   - otherwise (another world size, stage or bucket size): each rank rebuilds the values of its
//     stepped ranges from every saved piece by (parameter name, offset in parameter), the master
//     and each optimizer state tensor laid out like master; scalar state ("step") is copied.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "core/engine.h"

namespace zt {

// Per-rank strings saved with the checkpoint (e.g. "sampler" -> SamplerState line, user values).
using ClientState = std::map<std::string, std::string>;

struct CheckpointOptions {
  int64_t keep_last = 0;    // tags kept in dir (complete ones, newest first); 0 = all
  std::string config_json;  // resolved Config::to_json(), stored in the metadata
};

void save_checkpoint(Engine& engine, const std::string& dir, const std::string& tag,
                     const ClientState& client = {}, const CheckpointOptions& options = {});
// tag "" = the tag named in <dir>/latest. Returns this rank's client state (rank 0's when the
// checkpoint had fewer ranks than this run).
ClientState load_checkpoint(Engine& engine, const std::string& dir, const std::string& tag = "");

// The tag in <dir>/latest; throws naming the file when there is none.
std::string latest_checkpoint_tag(const std::string& dir);
// The complete tags in `dir` (a metadata file present; shards not yet validated), newest
// metadata first; none when `dir` does not exist.
std::vector<std::string> complete_checkpoint_tags(const std::string& dir);

// Consolidation, one parameter at a time (peak memory ~ the largest parameter): calls fn(name,
// value) for every trainable parameter, in the model's order, with the full fp32 value of `what`
// ("master", or an optimizer state key laid out like master such as "exp_avg") assembled from
// every shard; frozen parameters (saved by rank 0) follow when what == "master". Validates the
// checkpoint first, like load_checkpoint.
void for_each_consolidated(const std::string& dir, const std::string& tag, const std::string& what,
                           const std::function<void(const std::string&, const at::Tensor&)>& fn);
// How a format stores a parameter that the model holds fused: consecutive runs of its flattened
// elements, each a tensor of its own name and shape (a mixture's experts, one tensor per expert).
struct StoredPiece {
  std::string name;
  std::vector<int64_t> shape;
};
// The pieces of parameter `name` (shape), in order, covering it whole; none: stored as it is.
using StoredLayout = std::function<std::vector<StoredPiece>(const std::string& name,
                                                            const std::vector<int64_t>& shape)>;

// Writes the fp32 master weights as one safetensors file (header JSON, then tensors in model
// order), streaming parameter by parameter; `layout` (when given) names what each is stored as.
void consolidate_to_safetensors(const std::string& dir, const std::string& tag,
                                const std::string& out_path, const StoredLayout& layout = {});

}  // namespace zt
