#pragma once
// Partitioned construction (DeepSpeed's zero.Init, the LibTorch way): a model is built unit by
// unit, and after each unit this rank keeps only its slice of the unit's flat buffers, so no rank
// ever holds the whole model (docs/DESIGN.md, "Partitioned construction").
//
//   zt::zero::PartitionedInit parts({.rank = r, .world = n, .reduce_bucket_size = b});
//   // inside the model's constructor, every rank, same seed:
//   ... build and initialise the root's modules (embeddings, final norm) ...
//   parts.add_root(*this);                     // the parameters built so far, outside any unit
//   for (i ...) {
//     auto block = blocks->push_back(Block(...));   // constructed and initialised: full values
//     parts.add_unit("blocks." + i, *block);       // slice kept, the rest freed
//   }
//   parts.load(pretrained);                    // optional: values from a ShardWeightSource
//   zt::Engine engine(model, options, comm, parts_ptr);  // adopts the slices: no broadcast
//
// Every rank runs the same constructor with the same seed, so the RNG stream is consumed
// identically and rank r's slice equals the slice of a plain construction (bit for bit); nothing
// is communicated during construction. A unit is laid out exactly as the engine will lay it out
// (units.h: lay_out_unit, the same reduce_bucket_size and world size), so each flat buffer's
// slice becomes the engine's stage-3 shard as it is.
//
// Memory during construction, per rank: the unit being built (its parameters as its modules
// allocated them) plus this rank's shards of the units before it:
//
//   add_unit:  shard (shard,) allocated (the parameters' dtype, or PartitionOptions::dtype), this
//              rank's range copied from each parameter;
//              each parameter becomes a view of a flat buffer (padded,) whose storage holds no
//              bytes (released_storage.h), which drops the module's own allocation.
//              A persistent buffer (fewer than persistence_threshold elements) stays whole.
//
//   load:      each shard's (and persistent buffer's) elements overwritten in place from a
//              ShardWeightSource, parameter by parameter; nothing is allocated here, so the peak
//              is the shards plus what the source holds for one call (SafetensorsWeights: nothing
//              but the file's mapped pages).
//
// Parameters that do not require gradients, or that the config's `freeze` globs match, are left
// as they are (the engine keeps frozen parameters whole on every rank; load fills them whole). A
// partitioned parameter's values cannot be read until the engine gathers its unit.

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include "core/zero/flat_buffer.h"
#include "parallel/communicator.h"
#include "weights/shard_weight_source.h"

namespace zt::zero {

struct PartitionOptions {
  int rank = 0;
  int world = 1;
  int64_t reduce_bucket_size = 500000000;  // zero_optimization.reduce_bucket_size
  int64_t persistence_threshold = 0;       // stage3_param_persistence_threshold
  std::vector<std::string> frozen = {};    // the config's `freeze` globs: left whole
  // Where the shards (and persistent buffers) are made; unset: each unit's parameters' device. A
  // model built on the host for a GPU is then never whole on the GPU, nor in host memory beyond
  // one unit.
  std::optional<c10::Device> device = {};
  // The dtype the shards (and persistent buffers) are kept in; unset: each unit's parameters'.
  // The compute dtype where the master is bf16 too (bf16.bf16_master_weights_and_grads): the
  // engine then needs nothing of the fp32 values, and construction holds 2 bytes per parameter
  // of this rank's shards instead of 4.
  std::optional<at::ScalarType> dtype = {};
};

// One flat buffer built at construction, until a bucket adopts it.
struct PartitionedBuffer {
  dist::FlatLayout layout;
  at::Tensor flat = {};   // (padded,) the parameters are views of it; no bytes unless persistent
  at::Tensor shard = {};  // (shard,) this rank's slice; undefined for a persistent buffer
  bool persistent = false;
  bool adopted = false;
  std::string unit = {};  // for messages: the unit's name, "" for the root
  // The full values' bit patterns summed as integers (exact, so independent of threads) modulo
  // 2^52: equal on every rank when every rank built the same values.
  double fingerprint = 0;
};

class PartitionedInit {
 public:
  explicit PartitionedInit(PartitionOptions options);
  PartitionedInit(const PartitionedInit&) = delete;
  PartitionedInit& operator=(const PartitionedInit&) = delete;

  // Unit `name` (a submodule named as the engine's `units` name it) is built and initialised:
  // keeps this rank's slice of its trainable parameters and frees the rest. A unit nested inside
  // it (units.h) is added first, and this one skips its parameters.
  void add_unit(const std::string& name, torch::nn::Module& unit);
  // The model's trainable parameters built so far that belong to no unit added before: the
  // engine's root unit. Call it once every root parameter exists (before the units, or after).
  void add_root(torch::nn::Module& model);
  // Once the model is built, every rank, before the engine: overwrites the values built with
  // `source`'s, this rank's range of each flat buffer (the whole of a persistent one) and the
  // frozen parameters left whole. Every parameter is asked for, in construction order, with an
  // empty range where this rank holds none of it (weights/shard_weight_source.h). The values are
  // then what a whole model loaded from `source` holds, and check_same_on_every_rank still checks
  // the values constructed, not these.
  void load(ShardWeightSource& source);

  // ---- the engine's side (unit_buckets.h: make_buckets) ----
  // The buffer laid out as `layout` (the same parameters in the same order), marked adopted;
  // nullptr when none of its parameters was partitioned. The caller moves `flat` and `shard` out
  // (so this object keeps no tensor alive after the engine's cast). A mismatch is an error naming
  // the parameter and the settings that differ.
  PartitionedBuffer* adopt(const dist::FlatLayout& layout, bool persistent);
  // Every buffer built was adopted (else an error naming its first parameter).
  void check_all_adopted() const;
  // Collective (one all-reduce): every rank built the same values (the same constructor and
  // seed); else an error naming the first unit and parameter that differ. The plain path needs
  // no such check: it broadcasts rank 0's values.
  void check_same_on_every_rank(dist::Communicator& comm) const;

  const PartitionOptions& options() const { return options_; }
  bool empty() const { return buffers_.empty(); }
  // Bytes this rank holds after construction: its shards plus persistent buffers.
  int64_t resident_bytes() const { return resident_bytes_; }
  // Bytes of the largest unit (or root) as built, padding excluded.
  int64_t largest_unit_bytes() const { return largest_unit_bytes_; }

 private:
  void partition(const std::string& unit, std::vector<std::pair<std::string, at::Tensor>> params);
  bool trainable(const std::string& name, const at::Tensor& p) const;

  PartitionOptions options_;
  std::vector<PartitionedBuffer> buffers_;
  // Parameter (TensorImpl) -> index into buffers_.
  std::unordered_map<const void*, size_t> owner_;
  std::unordered_set<const void*> added_;                 // every parameter of units added so far
  std::unordered_map<const void*, std::string> unit_of_;  // parameter -> the unit that added it
  // Parameters added but left whole (not trainable), for load.
  std::vector<std::pair<std::string, at::Tensor>> whole_;
  int64_t largest_unit_bytes_ = 0;
  int64_t resident_bytes_ = 0;
  bool root_added_ = false;
};

}  // namespace zt::zero
