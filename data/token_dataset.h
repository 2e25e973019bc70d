#pragma once
// TokenDataset: a token shard (layout in token_shard_format.h) memory-mapped read-only. Nothing is
// copied into RAM: pages come from the OS page cache on first touch and are shared by every rank
// on the node that maps the same file.
//
// Opening validates the header (magic, version, token width, section offsets inside the file,
// file size) and the offsets array (starts at 0, non-decreasing, ends at num_tokens), and by
// default the checksum; any failure is a zt::Error naming the file and what is wrong, e.g.
//   shard /data/kjv.ztt: file is 1024 bytes, header says 4300800 (truncated copy?)
//
//   zt::data::TokenDataset ds("train.ztt");
//   TokenSpan s = ds.tokens(7);        // view into the mapping, uint16 or uint32 underneath
//   at::Tensor t = ds.tensor(7);       // (length(7),) int64 copy

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "data/sample_source.h"
#include "data/token_shard_format.h"

namespace zt::data {

// A view of one sample's tokens inside the mapping; valid while the dataset lives.
class TokenSpan {
 public:
  TokenSpan(const void* data, int64_t size, uint32_t token_bytes)
      : data_(data), size_(size), token_bytes_(token_bytes) {}
  int64_t size() const { return size_; }
  uint32_t token_bytes() const { return token_bytes_; }
  int64_t operator[](int64_t k) const {
    return token_bytes_ == 2 ? static_cast<const uint16_t*>(data_)[k]
                             : static_cast<const uint32_t*>(data_)[k];
  }
  // Typed access; the caller checks token_bytes() first.
  const uint16_t* u16() const { return static_cast<const uint16_t*>(data_); }
  const uint32_t* u32() const { return static_cast<const uint32_t*>(data_); }
  // Widens the tokens into out[0, size()).
  void copy_to(int64_t* out) const;

 private:
  const void* data_;
  int64_t size_;
  uint32_t token_bytes_;
};

struct TokenDatasetOptions {
  // Reads every byte once at open to compare the checksum (about 1 s per GB); turn off for huge
  // shards whose integrity is checked elsewhere.
  bool verify_checksum = true;
};

class TokenDataset : public SampleSource {
 public:
  explicit TokenDataset(const std::string& path, TokenDatasetOptions options = {});
  ~TokenDataset() override;
  TokenDataset(const TokenDataset&) = delete;
  TokenDataset& operator=(const TokenDataset&) = delete;

  const std::string& path() const { return path_; }
  const ShardHeader& header() const { return header_; }
  int64_t num_tokens() const { return static_cast<int64_t>(header_.num_tokens); }
  uint32_t vocab_size() const { return header_.vocab_size; }
  uint64_t tokenizer_id() const { return header_.tokenizer_id; }
  // The meta section as written ("key=value" lines) and one value from it ("" when absent).
  const std::string& meta() const { return meta_; }
  std::string meta_value(const std::string& key) const;
  // The id batches of this shard are padded with: the meta's pad_id, which zt-pretokenize copies
  // from the tokenizer. A SentencePiece model without a pad piece records -1; the meta's eos_id
  // then stands in, as Hugging Face users do for GPT-2 and Llama (pad_token = eos_token). That is
  // safe here because the collator marks pads by position, not by id: attention_mask 0 and
  // ignore_index labels, so a real eos keeps its loss (HF's id-based masking drops it). Throws
  // zt::Error naming the file when pad_id is missing or not an integer, is -1 without an eos_id,
  // or is outside [0, vocab_size).
  int64_t pad_id() const;
  const std::vector<std::string>& label_fields() const { return label_fields_; }

  TokenSpan tokens(int64_t i) const;
  at::Tensor tensor(int64_t i) const;  // (length(i),) int64
  // The labels of sample i, num_label_fields() of them.
  const int64_t* labels(int64_t i) const;

  // SampleSource.
  int64_t size() const override { return static_cast<int64_t>(header_.num_samples); }
  int64_t length(int64_t i) const override;
  void read_tokens(int64_t i, std::vector<int64_t>* out) const override;
  int64_t num_label_fields() const override { return header_.num_label_fields; }
  void read_labels(int64_t i, int64_t* out) const override;

 private:
  void check_index(int64_t i) const;
  void validate(const TokenDatasetOptions& options);

  std::string path_;
  int fd_ = -1;
  const unsigned char* base_ = nullptr;
  uint64_t mapped_bytes_ = 0;
  ShardHeader header_{};
  const int64_t* offsets_ = nullptr;  // (num_samples + 1)
  const int64_t* labels_ = nullptr;   // (num_samples, num_label_fields)
  const void* tokens_ = nullptr;      // num_tokens of token_bytes each
  std::string meta_;
  std::vector<std::string> label_fields_;
};

}  // namespace zt::data
