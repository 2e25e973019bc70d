#pragma once
// SampleSource: what samplers, the collator and the loader need from a dataset, so a memory-mapped
// TokenDataset and an on-the-fly TextDataset (SentencePiece sampling) are interchangeable.
//
// Contract: sample indices are [0, size()); every method is const and safe to call from several
// loader threads at once.

#include <cstdint>
#include <vector>

namespace zt::data {

class SampleSource {
 public:
  virtual ~SampleSource() = default;

  virtual int64_t size() const = 0;
  // Token count of sample i as the samplers should see it (for bucketing and token budgets).
  virtual int64_t length(int64_t i) const = 0;
  // Replaces *out with the tokens of sample i.
  virtual void read_tokens(int64_t i, std::vector<int64_t>* out) const = 0;
  // int64 labels per sample (classification targets, ...); 0 when the data has none.
  virtual int64_t num_label_fields() const { return 0; }
  // Writes num_label_fields() labels of sample i to out.
  virtual void read_labels(int64_t /*i*/, int64_t* /*out*/) const {}

  // length(i) for every i, the samplers' input.
  std::vector<int64_t> lengths() const {
    std::vector<int64_t> out(static_cast<size_t>(size()));
    for (int64_t i = 0; i < size(); ++i) out[static_cast<size_t>(i)] = length(i);
    return out;
  }
};

}  // namespace zt::data
