#pragma once
// Collator: dynamic padding. Turns the samples of one batch into tensors padded to the longest
// sample of the batch (not to a global maximum), optionally rounded up to a multiple of 8 for
// tensor cores, and truncated to max_length.
//
// Layout of a Batch of B samples, T = padded length:
//   input_ids       (B, T) int64, pad = pad_id (0 for models trained by zt-pretokenize)
//   attention_mask  (B, T) int64, 1 = real token, 0 = pad
//   labels          (B, T) int64, ignore_index (-100) at pads, so cross-entropy skips them;
//                   without causal_lm_shift labels = input_ids (the model shifts, HF style);
//                   with causal_lm_shift a sample of L tokens gives inputs tokens[0, L-1) and
//                   labels tokens[1, L) (llm.c style): position t predicts token t+1
//   sample_labels   (B, num_label_fields) int64, the dataset's per-sample labels (undefined
//                   tensor when the dataset has none)
//   indices         (B,) int64 sample indices, for debugging and evaluation
//
// Truncation keeps the first max_length inputs (with the shift: the first max_length + 1 tokens).
// T = min(round_up(longest, pad_to_multiple), max_length) when max_length > 0.

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "data/sample_source.h"

namespace zt::data {

struct CollatorOptions {
  int64_t pad_id = 0;
  int64_t pad_to_multiple = 1;  // 8 for tensor cores
  int64_t max_length = 0;       // 0 = no truncation
  bool causal_lm_shift = false;
  int64_t ignore_index = -100;  // PyTorch's cross_entropy default
};

struct Batch {
  at::Tensor input_ids;       // (B, T) int64
  at::Tensor attention_mask;  // (B, T) int64
  at::Tensor labels;          // (B, T) int64
  at::Tensor sample_labels;   // (B, num_label_fields) int64 or undefined
  at::Tensor indices;         // (B,) int64
  // (B,) bool, true where the sample repeats one an earlier batch of the epoch holds (the
  // sampler's tail fills the last step so), undefined when none does (data/loader.h).
  at::Tensor repeated;
  int64_t num_tokens = 0;         // real (unpadded) input tokens = attention_mask.sum()
  int64_t num_padded_tokens = 0;  // B * T: what the model computes on
  int64_t batch_size() const { return input_ids.defined() ? input_ids.size(0) : 0; }
  // `rows` (B, ...) without the rows of the tail's repeats: what a per-sample evaluation metric
  // sums over, so that each sample counts once.
  at::Tensor without_repeats(const at::Tensor& rows) const;
  double padding_fraction() const {
    return num_padded_tokens ? 1.0 - static_cast<double>(num_tokens) / num_padded_tokens : 0.0;
  }
};

class Collator {
 public:
  explicit Collator(CollatorOptions options = {});

  // Reads samples `indices` from `source` and pads them. Thread-safe (const).
  Batch collate(const SampleSource& source, const std::vector<int64_t>& indices) const;
  // Hand-made batches: samples[b] are the tokens of row b; sample_labels, when given, has one
  // row of equal width per sample.
  Batch collate(const std::vector<std::vector<int64_t>>& samples,
                const std::vector<std::vector<int64_t>>& sample_labels = {},
                const std::vector<int64_t>& indices = {}) const;

  // T for a batch whose longest sample has `longest` tokens (before the shift).
  int64_t padded_length(int64_t longest) const;
  const CollatorOptions& options() const { return options_; }

 private:
  CollatorOptions options_;
};

}  // namespace zt::data
