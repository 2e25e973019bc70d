#pragma once
// TextDataset: raw texts encoded on the fly, for subword regularization (a model trained on many
// segmentations of the same text gains accuracy and robustness): with
// EncodeOptions::enable_sampling every read draws a new segmentation, so each epoch sees the
// corpus cut differently. Costs encoding time on the loader threads every epoch; a pre-tokenized
// TokenDataset is the fast path.
//
// length(i) is the length of the best (unsampled) encoding, computed once at construction, so the
// samplers see stable lengths; a sampled encoding is usually a little longer (more, smaller
// pieces). Give the collator a max_length if a budget must hold strictly.

#include <memory>
#include <string>
#include <vector>

#include "data/sample_source.h"
#include "data/tokenizer.h"

namespace zt::data {

class TextDataset : public SampleSource {
 public:
  // `labels`: empty, or one row of equal width per text.
  TextDataset(std::vector<std::string> texts, std::shared_ptr<const Tokenizer> tokenizer,
              EncodeOptions encode_options, std::vector<std::vector<int64_t>> labels = {});

  int64_t size() const override { return static_cast<int64_t>(texts_.size()); }
  int64_t length(int64_t i) const override;
  void read_tokens(int64_t i, std::vector<int64_t>* out) const override;
  int64_t num_label_fields() const override;
  void read_labels(int64_t i, int64_t* out) const override;

 private:
  std::vector<std::string> texts_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  EncodeOptions encode_options_;
  std::vector<std::vector<int64_t>> labels_;
  std::vector<int64_t> lengths_;
};

}  // namespace zt::data
