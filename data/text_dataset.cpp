#include "data/text_dataset.h"

#include "base/error.h"

namespace zt::data {

TextDataset::TextDataset(std::vector<std::string> texts, std::shared_ptr<const Tokenizer> tokenizer,
                         EncodeOptions encode_options, std::vector<std::vector<int64_t>> labels)
    : texts_(std::move(texts)),
      tokenizer_(std::move(tokenizer)),
      encode_options_(encode_options),
      labels_(std::move(labels)) {
  ZT_CHECK(tokenizer_, "TextDataset: no tokenizer");
  ZT_CHECK(labels_.empty() || labels_.size() == texts_.size(), "TextDataset: ", labels_.size(),
           " label rows for ", texts_.size(), " texts");
  EncodeOptions best = encode_options_;
  best.enable_sampling = false;
  lengths_.reserve(texts_.size());
  for (const auto& t : texts_) {
    lengths_.push_back(static_cast<int64_t>(tokenizer_->encode(t, best).size()));
  }
}

int64_t TextDataset::length(int64_t i) const {
  ZT_CHECK(i >= 0 && i < size(), "TextDataset: sample index ", i, " out of range [0, ", size(),
           ")");
  return lengths_[static_cast<size_t>(i)];
}

void TextDataset::read_tokens(int64_t i, std::vector<int64_t>* out) const {
  ZT_CHECK(i >= 0 && i < size(), "TextDataset: sample index ", i, " out of range [0, ", size(),
           ")");
  std::vector<int> ids = tokenizer_->encode(texts_[static_cast<size_t>(i)], encode_options_);
  out->assign(ids.begin(), ids.end());
}

int64_t TextDataset::num_label_fields() const {
  return labels_.empty() ? 0 : static_cast<int64_t>(labels_[0].size());
}

void TextDataset::read_labels(int64_t i, int64_t* out) const {
  const auto& row = labels_.at(static_cast<size_t>(i));
  for (size_t k = 0; k < row.size(); ++k) out[k] = row[k];
}

}  // namespace zt::data
