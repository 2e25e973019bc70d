#pragma once
// Flat buffers: the memory layout of ZeRO (docs/DESIGN.md, ZeRO).
//
// A FlatLayout packs a list of parameters back to back into one 1-D buffer and pads its end so
// the length is a multiple of the world size N:
//
//   flat  (padded_numel,)   = [ p0 | p1 | ... | pk | pad ]     padded_numel = N * shard_numel
//   rank r owns            = flat[r * shard_numel, (r + 1) * shard_numel)
//
// Each parameter becomes a view of its range of the flat buffer (bind_parameters), so modules
// and autograd keep their handles while reductions, all-gathers and optimizer steps work on one
// contiguous tensor. The engine cuts a model's trainable parameters into several such buffers
// (buckets of at most reduce_bucket_size elements), so "slice r of each buffer" is what rank r
// owns, and one reduce-scatter per bucket delivers exactly that slice.

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace zt::dist {

// [begin, end) in elements.
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
};

// The intersection of two ranges (empty when they do not overlap).
Range intersect(Range a, Range b);

struct FlatEntry {
  std::string name;  // the parameter's name in the model
  at::Tensor param;  // the parameter itself
  Range range;       // its elements inside the flat buffer
};

class FlatLayout {
 public:
  // Lays out `params` (name, tensor) in the given order, padded to a multiple of world_size.
  FlatLayout(std::vector<std::pair<std::string, at::Tensor>> params, int world_size);

  const std::vector<FlatEntry>& entries() const { return entries_; }
  int64_t numel() const { return numel_; }                // without padding
  int64_t padded_numel() const { return padded_numel_; }  // N * shard_numel
  int64_t shard_numel() const { return padded_numel_ / world_size_; }
  int world_size() const { return world_size_; }
  // The slice rank r owns, in flat-buffer coordinates.
  Range shard_range(int rank) const;

  // Copies every parameter's current values into `flat` (padding zeroed) and makes each
  // parameter a view of its range, keeping the parameter's own TensorImpl (set_data), so module
  // and optimizer handles stay valid. flat: (padded_numel,), dtype of the parameters' new data.
  void bind_parameters(const at::Tensor& flat) const;
  // Makes each parameter a view of its range of `flat` without reading or writing values (flat's
  // storage may hold no bytes yet: a released stage-3 buffer).
  void view_parameters(const at::Tensor& flat) const;

 private:
  std::vector<FlatEntry> entries_;
  int64_t numel_ = 0;
  int64_t padded_numel_ = 0;
  int world_size_ = 1;
};

// Cuts `params` (in the given order) into consecutive groups of at most `max_bucket_numel`
// elements; a parameter larger than the limit gets a group of its own. Returns group sizes.
std::vector<size_t> plan_buckets(const std::vector<at::Tensor>& params, int64_t max_bucket_numel);

}  // namespace zt::dist
