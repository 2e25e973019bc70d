#include "data/collator.h"

#include <algorithm>

#include "base/error.h"

namespace zt::data {

Collator::Collator(CollatorOptions options) : options_(options) {
  ZT_CHECK(options_.pad_to_multiple >= 1, "collator: pad_to_multiple must be >= 1, got ",
           options_.pad_to_multiple);
  ZT_CHECK(options_.max_length >= 0, "collator: max_length must be >= 0, got ",
           options_.max_length);
}

int64_t Collator::padded_length(int64_t longest) const {
  int64_t inputs = options_.causal_lm_shift ? std::max<int64_t>(longest - 1, 0) : longest;
  if (options_.max_length > 0) inputs = std::min(inputs, options_.max_length);
  const int64_t m = options_.pad_to_multiple;
  int64_t t = (inputs + m - 1) / m * m;
  if (options_.max_length > 0) t = std::min(t, options_.max_length);
  return t;
}

at::Tensor Batch::without_repeats(const at::Tensor& rows) const {
  return repeated.defined() ? rows.index({repeated.logical_not()}) : rows;
}

Batch Collator::collate(const SampleSource& source, const std::vector<int64_t>& indices) const {
  std::vector<std::vector<int64_t>> samples(indices.size());
  std::vector<std::vector<int64_t>> labels;
  const int64_t nl = source.num_label_fields();
  if (nl > 0) labels.assign(indices.size(), std::vector<int64_t>(static_cast<size_t>(nl)));
  for (size_t b = 0; b < indices.size(); ++b) {
    source.read_tokens(indices[b], &samples[b]);
    if (nl > 0) source.read_labels(indices[b], labels[b].data());
  }
  return collate(samples, labels, indices);
}

Batch Collator::collate(const std::vector<std::vector<int64_t>>& samples,
                        const std::vector<std::vector<int64_t>>& sample_labels,
                        const std::vector<int64_t>& indices) const {
  ZT_CHECK(!samples.empty(), "collator: empty batch");
  ZT_CHECK(sample_labels.empty() || sample_labels.size() == samples.size(),
           "collator: ", sample_labels.size(), " label rows for ", samples.size(), " samples");
  ZT_CHECK(indices.empty() || indices.size() == samples.size(), "collator: ", indices.size(),
           " indices for ", samples.size(), " samples");
  const auto B = static_cast<int64_t>(samples.size());
  int64_t longest = 0;
  for (const auto& s : samples) longest = std::max(longest, static_cast<int64_t>(s.size()));
  const int64_t T = padded_length(longest);
  const bool shift = options_.causal_lm_shift;

  Batch out;
  out.input_ids = at::full({B, T}, options_.pad_id, at::kLong);
  out.attention_mask = at::zeros({B, T}, at::kLong);
  out.labels = at::full({B, T}, options_.ignore_index, at::kLong);
  int64_t* ids = out.input_ids.data_ptr<int64_t>();
  int64_t* mask = out.attention_mask.data_ptr<int64_t>();
  int64_t* lab = out.labels.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const auto& s = samples[static_cast<size_t>(b)];
    const auto len = static_cast<int64_t>(s.size());
    const int64_t n = std::min(T, shift ? std::max<int64_t>(len - 1, 0) : len);
    for (int64_t t = 0; t < n; ++t) {
      ids[b * T + t] = s[static_cast<size_t>(t)];
      mask[b * T + t] = 1;
      lab[b * T + t] = s[static_cast<size_t>(shift ? t + 1 : t)];
    }
    out.num_tokens += n;
  }
  out.num_padded_tokens = B * T;
  if (!sample_labels.empty()) {
    const auto nl = static_cast<int64_t>(sample_labels[0].size());
    out.sample_labels = at::empty({B, nl}, at::kLong);
    int64_t* sl = out.sample_labels.data_ptr<int64_t>();
    for (int64_t b = 0; b < B; ++b) {
      const auto& row = sample_labels[static_cast<size_t>(b)];
      ZT_CHECK(static_cast<int64_t>(row.size()) == nl, "collator: sample ", b, " has ", row.size(),
               " labels, sample 0 has ", nl);
      std::copy(row.begin(), row.end(), sl + b * nl);
    }
  }
  out.indices = at::empty({B}, at::kLong);
  int64_t* ix = out.indices.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) ix[b] = indices.empty() ? -1 : indices[static_cast<size_t>(b)];
  return out;
}

}  // namespace zt::data
