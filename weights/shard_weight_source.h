#pragma once
// Where a model built partitioned takes its initial values from instead of its constructor's
// initialisation: pretrained weights read straight into this rank's shards
// (PartitionedInit::load, docs/DESIGN.md "Partitioned construction"). A source hands out any
// element range of any parameter, by the parameter's name in the model, so no rank ever holds
// more than its shards plus what the source needs for one call.
//
//   class Zeros : public zt::zero::ShardWeightSource {
//     void fill(const std::string&, at::IntArrayRef, int64_t, const at::Tensor& dst) override {
//       dst.zero_();
//     }
//   };
//   parts.load(zeros);   // every rank, after the model is built, before the engine

#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>

namespace zt::zero {

class ShardWeightSource {
 public:
  virtual ~ShardWeightSource() = default;

  // Writes elements [begin, begin + dst.numel()) of parameter `name` (full shape `shape`,
  // flattened row-major as the model holds it) into dst: 1-D, contiguous, the parameter's dtype
  // (the source converts). Called for every parameter on every rank in the same order, with an
  // empty dst where this rank holds none of the parameter, so that a missing or misshapen value
  // is the same error on every rank (one line naming the parameter and where it was looked for).
  virtual void fill(const std::string& name, at::IntArrayRef shape, int64_t begin,
                    const at::Tensor& dst) = 0;
};

}  // namespace zt::zero
