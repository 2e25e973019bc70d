#pragma once
// Pretrained values from safetensors files (SafetensorsSet: one file or a sharded set with its
// index), by parameter name, as a ShardWeightSource for a model built partitioned
// (PartitionedInit::load): each call copies only the elements asked for, straight from the mapped
// file (SafetensorsReader::map), converting the file's dtype (F32, BF16, F16, F64) to the
// shard's on the copy. Peak memory: this rank's shards; the file's pages a call touches are
// page cache, and leave this process's resident set when the call returns
// (SafetensorsReader::drop_pages), so its RSS grows by at most one tensor's pages at a time.
//
//   zt::SafetensorsSet files("gpt2/");
//   zt::SafetensorsWeights w(files, [](const std::string& p) { return zt::StoredTensor{p}; });
//   parts.load(w);                                               // every rank
//   w.check_all_used([](const std::string& t) { return t == "lm_head.weight"; });
//
// Layouts. A parameter stored in our layout is one contiguous byte range of the file: the call
// reads the pages of its elements and no others. A 2-D weight stored transposed
// (StoredTensor::transposed: ours (out, in) row-major, the file's (in, out), as GPT-2's Conv1D
// keeps it) is copied through strides from the mapping: a rank's contiguous run of our rows is a
// band of columns of the file, which touches a page of every file row, so the I/O is the whole
// tensor's pages (read once per node into the page cache) while this process allocates nothing
// beyond its shard. (Reading the tensor whole and copying the slice would hold one tensor more.)
//
// Errors, each one line naming the file (or the index) and the tensor: a parameter with no
// tensor, a tensor of another shape, a tensor that is not floating point, and (check_all_used) a
// tensor no parameter took.

#include <cstdint>
#include <functional>
#include <set>
#include <string>

#include "weights/safetensors_set.h"
#include "weights/shard_weight_source.h"

namespace zt {

// How a parameter is stored: the tensor's name in the files and whether it is transposed.
struct StoredTensor {
  std::string name;
  bool transposed = false;
};

class SafetensorsWeights : public zero::ShardWeightSource {
 public:
  // The file tensor of a parameter name (throws for a parameter the files cannot have).
  using Naming = std::function<StoredTensor(const std::string& parameter)>;
  // `files` must outlive this object.
  SafetensorsWeights(const SafetensorsSet& files, Naming naming);

  void fill(const std::string& name, at::IntArrayRef shape, int64_t begin,
            const at::Tensor& dst) override;

  // After load: every tensor of the files was taken by a parameter, or `ignored` accepts its
  // name (a tied head, buffers the model does not keep); else an error naming file and tensor.
  void check_all_used(const std::function<bool(const std::string& tensor)>& ignored) const;
  // Distinct parameters filled so far.
  int64_t parameters_filled() const { return static_cast<int64_t>(used_.size()); }

 private:
  const SafetensorsSet& files_;
  Naming naming_;
  std::set<std::string> used_;  // file tensor names asked for
};

}  // namespace zt
